package workload

import (
	"math"
	"slices"
	"sort"
)

// Default sizes of the prefix suites, before Scale. They are chosen for
// the benchmark fleet (docs/benchmarks.md, "Under pressure": 16 engines
// with a 64k-token KV cache each, four per cluster): either catalogue
// (about 192k tokens of prompts, or of documents) is three engines' worth
// of cache, so an engine that receives every prefix thrashes, while a
// quarter of it fits one engine, so a router that gives each cluster its
// own prefixes can keep all of them cached.
const (
	sharedPrompts        = 64
	sharedPromptTokens   = 3000 // 2k to 4k
	sharedQuestionTokens = 100
	sharedOutputTokens   = 48

	ragDocs           = 32
	ragDocTokens      = 6000 // 4k to 8k
	ragQuestionTokens = 60
	ragFollowUpTokens = 40
	ragOutputTokens   = 96
	ragTurns          = 3
	ragFollowUps      = 0.3

	// The keyed and anonymous sessions of prefix-mix have the sessions
	// suite's default shape.
	mixSessionTurns  = 6
	mixSessionFirst  = 1500
	mixSessionTurn   = 150
	mixSessionOutput = 48
)

// PrefixMixShares split prefix-mix's Rate between its streams, in the
// order its requests are labelled: keyed sessions, anonymous sessions,
// shared-prefix one-shots, rag conversations.
var PrefixMixShares = []struct {
	Stream string
	Share  float64
}{{"keyed", 0.3}, {"anon", 0.3}, {"shared", 0.2}, {"rag", 0.2}}

// validatePrefixSuite adds the prefix suites' own checks to validate.
func (p *SuiteParams) validatePrefixSuite(suite string, bad func(flag, format string, args ...any)) {
	if math.IsNaN(p.Zipf) || math.IsInf(p.Zipf, 0) {
		bad("zipf", "must be a finite number, got %v", p.Zipf)
	}
	if p.FollowUps > 1 || math.IsNaN(p.FollowUps) {
		bad("follow-ups", "must be in 0..1, got %v", p.FollowUps)
	}
	usesPrompts := suite == SuiteSharedPrefix || suite == SuitePrefixMix
	usesDocs := suite == SuiteRAG || suite == SuitePrefixMix
	for _, f := range []struct {
		flag string
		v    int
		used bool
	}{
		{"prompts", p.Prompts, usesPrompts}, {"prompt-tokens", p.PromptTokens, usesPrompts},
		{"docs", p.Docs, usesDocs}, {"doc-tokens", p.DocTokens, usesDocs},
	} {
		if f.used && f.v < 1 {
			bad(f.flag, "must be >= 1 (0 = suite default), got %d", f.v)
		}
	}
	if suite == SuiteRAG && p.Turns < 1 {
		bad("turns", "must be >= 1, got %d", p.Turns)
	}
}

// catalogue is a suite's shared prefixes (system prompts or documents):
// names, sizes and Zipf popularity. It is drawn from its own random
// stream, keyed by the seed and its kind only, so every rate of a sweep
// (and prefix-mix) has the same catalogue; the names carry the seed's and
// salt's tag, so another salt has other texts.
type catalogue struct {
	names  []string
	tokens []int
	// cum holds the cumulative popularity weights: entry k is the sum of
	// (i+1)^-Zipf for i ≤ k.
	cum []float64
}

func (g *gen) catalogue(kind string, n, mean int) *catalogue {
	r := newRNG(g.p.Seed, "catalogue/"+kind)
	m := max(int(math.Round(float64(mean)*g.p.Scale)), 1)
	lo, hi := max(m-m/3, 1), m+m/3
	c := &catalogue{names: make([]string, n), tokens: make([]int, n), cum: make([]float64, n)}
	total := 0.0
	for i := range n {
		c.names[i] = g.name(kind, "%03d", i)
		c.tokens[i] = lo + r.intn(hi-lo+1)
		total += math.Pow(float64(i+1), -g.p.Zipf)
		c.cum[i] = total
	}
	return c
}

// pick draws a prefix by popularity: the first is the most popular.
func (c *catalogue) pick(r *rng) int {
	x := r.float() * c.cum[len(c.cum)-1]
	return min(sort.Search(len(c.cum), func(i int) bool { return c.cum[i] > x }), len(c.cum)-1)
}

// tokenSum is the catalogue's size in tokens, for the header.
func (c *catalogue) tokenSum() int {
	n := 0
	for _, t := range c.tokens {
		n += t
	}
	return n
}

// conv is one conversation of an open-loop stream, planned when it
// starts.
type conv struct {
	// id names the conversation in the file; "" for a one-shot request.
	id, src, ep  string
	prefix       string
	prefixTokens int
	// in and out are each turn's new-message and reply sizes.
	in, out []int
	// next is the next turn to send, from 0; readyAt the earliest time
	// it may be scheduled.
	next    int
	readyAt int64
}

// convStream fills the send offsets at with conversations: each arrival
// sends the next turn of the conversation that has been ready longest
// (its previous turn scheduled at least gapMs earlier), else the first
// turn of a new conversation from start. Conversations still open when
// the arrivals end stop there.
func convStream(label string, at []int64, gapMs int64, start func() *conv) []Request {
	var ready []*conv // FIFO by readyAt: arrivals never go back in time
	reqs := make([]Request, 0, len(at))
	for _, t := range at {
		var c *conv
		if len(ready) > 0 && ready[0].readyAt <= t {
			c, ready = ready[0], ready[1:]
		} else {
			c = start()
		}
		r := Request{AtMs: t, Session: c.id, Turn: c.next + 1, Source: c.src, Stream: label, Endpoint: c.ep,
			NewInputTokens: c.in[c.next], OutputTokens: c.out[c.next]}
		if c.next == 0 {
			r.Prefix, r.PrefixTokens = c.prefix, c.prefixTokens
		}
		reqs = append(reqs, r)
		if c.next++; c.next < len(c.in) {
			c.readyAt = t + gapMs
			ready = append(ready, c)
		}
	}
	return reqs
}

// sharedOneShot starts an anonymous one-shot request: a system prompt
// of cat, by popularity, then a short unique user message.
func (g *gen) sharedOneShot(cat *catalogue, question, output int) *conv {
	k := cat.pick(g.rng)
	return &conv{src: SourceNone, ep: "chat", prefix: cat.names[k], prefixTokens: cat.tokens[k],
		in: []int{g.rng.around(question, g.p.Scale)}, out: []int{g.rng.around(output, 1)}}
}

// ragShape is the shape of a rag conversation.
type ragShape struct {
	turns              int
	followUps          float64
	question, followUp int
	output             int
}

// ragConv starts an anonymous rag conversation about a document of cat,
// by popularity: one question, or with probability followUps 2 to turns
// questions, each turn re-sending the document and the conversation so
// far. Only a conversation of several questions gets an id (numbered by
// *n), since only its turns need linking in the file.
func (g *gen) ragConv(cat *catalogue, s ragShape, n *int) *conv {
	k := cat.pick(g.rng)
	questions := 1
	if s.turns > 1 && g.rng.float() < s.followUps {
		questions = 2 + g.rng.intn(s.turns-1)
	}
	c := &conv{src: SourceNone, ep: "chat", prefix: cat.names[k], prefixTokens: cat.tokens[k]}
	if questions > 1 {
		c.id = g.name("rag", "%05d", *n)
		*n++
	}
	for t := range questions {
		mean := s.followUp
		if t == 0 {
			mean = s.question
		}
		c.in = append(c.in, g.rng.around(mean, g.p.Scale))
		c.out = append(c.out, g.rng.around(s.output, 1))
	}
	return c
}

// sessionConv starts a session of the sessions suite's default shape:
// keyed (a source from g.source) or anonymous (source none on chat, its id
// only naming it in the file).
func (g *gen) sessionConv(prefix string, keyless bool, n *int) *conv {
	c := &conv{id: g.name(prefix, "%05d", *n), src: SourceNone, ep: "chat"}
	*n++
	if !keyless {
		c.src, c.ep = g.source()
	}
	for t := range mixSessionTurns {
		mean := mixSessionTurn
		if t == 0 {
			mean = mixSessionFirst
		}
		c.in = append(c.in, g.rng.around(mean, g.p.Scale))
		c.out = append(c.out, g.rng.around(mixSessionOutput, 1))
	}
	return c
}

// sharedPrefix is an open-loop stream at Rate for Duration of anonymous
// one-shot requests: one of Prompts system prompts (Zipf popularity)
// then a short user message of its own. Nothing but the system prompt
// links two requests.
func (g *gen) sharedPrefix() *Workload {
	p := g.p
	cat := g.catalogue("sys", p.Prompts, p.PromptTokens)
	reqs := convStream("", g.arrivals(p.Rate, p.Duration), 0, func() *conv {
		return g.sharedOneShot(cat, p.FirstTokens, p.OutputTokens)
	})
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: map[string]any{
		"target_rate": p.Rate, "duration_ms": p.Duration.Milliseconds(), "arrival": p.Arrival,
		"prompts": p.Prompts, "prompt_tokens": p.PromptTokens, "prompt_tokens_total": cat.tokenSum(), "zipf": p.Zipf,
		"first_tokens": p.FirstTokens, "output_tokens": p.OutputTokens, "scale": p.Scale,
	}}, Requests: reqs}
}

// rag is an open-loop stream at Rate for Duration of anonymous
// conversations about one of Docs documents (Zipf popularity): a
// question, and in a FollowUps share of them up to Turns questions in
// all, at least ThinkTime apart, each re-sending the document and the
// conversation so far.
func (g *gen) rag() *Workload {
	p := g.p
	cat := g.catalogue("doc", p.Docs, p.DocTokens)
	shape := ragShape{turns: p.Turns, followUps: p.FollowUps, question: p.FirstTokens, followUp: p.TurnTokens, output: p.OutputTokens}
	n := 0
	reqs := convStream("", g.arrivals(p.Rate, p.Duration), p.ThinkTime.Milliseconds(), func() *conv { return g.ragConv(cat, shape, &n) })
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: map[string]any{
		"target_rate": p.Rate, "duration_ms": p.Duration.Milliseconds(), "arrival": p.Arrival, "think_time_ms": p.ThinkTime.Milliseconds(),
		"docs": p.Docs, "doc_tokens": p.DocTokens, "doc_tokens_total": cat.tokenSum(), "zipf": p.Zipf,
		"turns": p.Turns, "follow_ups": p.FollowUps,
		"first_tokens": p.FirstTokens, "turn_tokens": p.TurnTokens, "output_tokens": p.OutputTokens, "scale": p.Scale,
	}}, Requests: reqs}
}

// prefixMix runs four open-loop streams at once, at the shares of Rate
// PrefixMixShares gives, merged by send time and labelled per request:
// keyed sessions and anonymous sessions of the sessions suite's shape
// (turns at least ThinkTime apart), shared-prefix one-shots and rag
// conversations with those suites' default sizes over catalogues of
// Prompts and Docs.
func (g *gen) prefixMix() *Workload {
	p := g.p
	gap := p.ThinkTime.Milliseconds()
	prompts := g.catalogue("sys", p.Prompts, p.PromptTokens)
	docs := g.catalogue("doc", p.Docs, p.DocTokens)
	shape := ragShape{turns: ragTurns, followUps: p.FollowUps, question: ragQuestionTokens, followUp: ragFollowUpTokens, output: ragOutputTokens}
	var keyed, anon, rag int
	starts := map[string]func() *conv{
		"keyed":  func() *conv { return g.sessionConv("sess", false, &keyed) },
		"anon":   func() *conv { return g.sessionConv("anon", true, &anon) },
		"shared": func() *conv { return g.sharedOneShot(prompts, sharedQuestionTokens, sharedOutputTokens) },
		"rag":    func() *conv { return g.ragConv(docs, shape, &rag) },
	}
	var reqs []Request
	rates := map[string]any{}
	for _, s := range PrefixMixShares {
		rate := p.Rate * s.Share
		rates[s.Stream+"_rate"] = rate
		reqs = append(reqs, convStream(s.Stream, g.arrivals(rate, p.Duration), gap, starts[s.Stream])...)
	}
	slices.SortStableFunc(reqs, func(a, b Request) int { return int(a.AtMs - b.AtMs) })
	params := map[string]any{
		"target_rate": p.Rate, "duration_ms": p.Duration.Milliseconds(), "arrival": p.Arrival, "think_time_ms": gap,
		"prompts": p.Prompts, "prompt_tokens": p.PromptTokens, "prompt_tokens_total": prompts.tokenSum(),
		"docs": p.Docs, "doc_tokens": p.DocTokens, "doc_tokens_total": docs.tokenSum(), "zipf": p.Zipf,
		"follow_ups": p.FollowUps, "scale": p.Scale,
	}
	for k, v := range rates {
		params[k] = v
	}
	return &Workload{Header: Header{Mode: ModeOpen, DurationMs: p.Duration.Milliseconds(), Params: params}, Requests: reqs}
}
