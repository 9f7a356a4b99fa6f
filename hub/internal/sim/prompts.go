package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
	"github.com/stargate-router/stargate/pkg/prefixhash"
	"github.com/stargate-router/stargate/pkg/workload"
)

// DefaultModel is the model id used when the workload names none.
const DefaultModel = "sim-model"

// Prepared is a workload turned into what every arm replays: each
// request's prompt as the mock engine would cut it into KV blocks, its
// token count and the keys the gateway would send. It is read-only and
// shared by concurrent arm runs.
type Prepared struct {
	W           *workload.Workload
	Fingerprint string
	Model       string
	BlockTokens int
	reqs        []preq
	// workers lists each closed-loop worker's requests in file order.
	workers [][]int
	// sessions is the number of distinct sessions.
	sessions int
}

// preq is one prepared request.
type preq struct {
	// text is the session name UserText is keyed by ("#<index>" for an
	// anonymous request, as the workload package documents).
	text string
	// prompt is the whole conversation so far plus this turn's message,
	// rendered as the mock engine renders chat ("role:content\n"): a
	// first turn opens with its shared prefix (workload.Opening).
	prompt kvcache.Sequence
	tokens int
	// affinity is the gateway's x-cache-affinity-key: the session's key,
	// or for a request whose source is none (a one-shot or an anonymous
	// conversation) a payload key of its own, as the gateway derives one
	// from each request's body.
	affinity string
	// session is the gateway's last-cluster key: the session id when its
	// source is eligible (prompt_cache_key, conversation, header), else "".
	session string
	// summary is the gateway's x-stargate-prompt-prefix for the prompt
	// (empty when it has no full block: the gateway sends no header), and
	// anchor its prefixhash.AnchorKey, the key a prefix-aware hub chooses
	// the backend and engine by for a request without a session key.
	summary prefixhash.Summary
	anchor  string
}

// Prepare renders every prompt of w once. The block size must be the
// fleet's (every engine shares one cache geometry).
func Prepare(w *workload.Workload, fingerprint string, blockTokens int) (*Prepared, error) {
	cut, err := newCutter(blockTokens)
	if err != nil {
		return nil, err
	}
	p := &Prepared{W: w, Fingerprint: fingerprint, Model: w.Header.Model, BlockTokens: blockTokens,
		reqs: make([]preq, len(w.Requests))}
	if p.Model == "" {
		p.Model = DefaultModel
	}
	if w.Header.Mode == workload.ModeClosed {
		p.workers = make([][]int, w.Header.Workers)
	}
	type hist struct {
		seq  prompt
		turn int
	}
	history := map[string]*hist{}
	seed := w.Header.Seed
	for i := range w.Requests {
		r := &w.Requests[i]
		pr := &p.reqs[i]
		var h *hist
		if r.Session == "" {
			pr.text = "#" + strconv.Itoa(r.Index)
		} else {
			pr.text = r.Session
			h = history[r.Session]
			switch {
			case h == nil && r.Turn == 1:
				h = &hist{}
				history[r.Session] = h
				p.sessions++
			case h == nil || r.Turn != h.turn+1:
				prev := 0
				if h != nil {
					prev = h.turn
				}
				return nil, fmt.Errorf("workload request %d: session %q turn %d follows turn %d", r.Index, r.Session, r.Turn, prev)
			}
		}
		switch r.Source {
		case workload.SourcePromptCacheKey, workload.SourceConversation, workload.SourceHeader:
			pr.affinity = "mt:v1:session:" + sha256Hex(r.Session)
			pr.session = r.Session
		default:
			// No session id: the gateway keys the request by its whole
			// body, which no other request (not even the conversation's
			// next turn) repeats.
			pr.affinity = "mt:v1:payload:" + sha256Hex("#"+strconv.Itoa(r.Index))
		}
		msg := userMessage(seed, pr.text, r.Turn, r.NewInputTokens)
		var seq prompt
		if h != nil && h.turn > 0 {
			seq = h.seq.extend(msg)
		} else {
			seq = cut.start(append(workload.Opening(seed, r), msg...))
		}
		if h != nil {
			h.seq = seq.extend(replyMessage(seed, pr.text, r.Turn, r.OutputTokens))
			h.turn = r.Turn
		}
		pr.prompt = seq.engine
		pr.tokens = pr.prompt.Tokens()
		pr.summary = prefixhash.Summarize(seq.gatewayHashes(), prefixhash.DefaultBlockTokens)
		pr.anchor = prefixhash.AnchorKey(pr.summary)
		if p.workers != nil {
			p.workers[r.Worker] = append(p.workers[r.Worker], i)
		}
	}
	return p, nil
}

// cutter cuts prompts into blocks twice: in the fleet's geometry, as the
// engines cache them, and in the gateway's (prefixhash's defaults: it
// summarises every prompt in 16-token blocks whatever its engines use).
// gateway is nil when the two geometries are one.
type cutter struct {
	engine, gateway *kvcache.Cache
}

func newCutter(blockTokens int) (cutter, error) {
	engine, err := kvcache.New(kvcache.Config{BlockTokens: blockTokens, CharsPerToken: workload.CharsPerToken})
	if err != nil {
		return cutter{}, err
	}
	c := cutter{engine: engine}
	if blockTokens != prefixhash.DefaultBlockTokens || workload.CharsPerToken != prefixhash.DefaultCharsPerToken {
		c.gateway, err = kvcache.New(kvcache.Config{BlockTokens: prefixhash.DefaultBlockTokens, CharsPerToken: prefixhash.DefaultCharsPerToken})
		if err != nil {
			return cutter{}, err
		}
	}
	return c, nil
}

// prompt is one prompt cut both ways; gateway is set only when the
// gateway's geometry differs from the engines'.
type prompt struct {
	engine, gateway kvcache.Sequence
	twoCuts         bool
}

func (c cutter) start(content []byte) prompt {
	if c.gateway == nil {
		return prompt{engine: c.engine.NewSequence(content)}
	}
	return prompt{engine: c.engine.NewSequence(content), gateway: c.gateway.NewSequence(content), twoCuts: true}
}

func (s prompt) extend(more []byte) prompt {
	if !s.twoCuts {
		return prompt{engine: s.engine.Extend(more)}
	}
	return prompt{engine: s.engine.Extend(more), gateway: s.gateway.Extend(more), twoCuts: true}
}

// gatewayHashes is the chain hash of every full block the gateway's
// summary counts.
func (s prompt) gatewayHashes() []uint64 {
	if s.twoCuts {
		return s.gateway.BlockHashes()
	}
	return s.engine.BlockHashes()
}

// userMessage is a turn's new user message as the mock renders it.
func userMessage(seed uint64, session string, turn, tokens int) []byte {
	return []byte("user:" + workload.UserText(seed, session, turn, tokens) + "\n")
}

// replyMessage is a turn's reply as the mock appends it to the sequence
// and the next turn re-sends it: OutputTokens·4 bytes of synthetic text.
func replyMessage(seed uint64, session string, turn, tokens int) []byte {
	return []byte("assistant:" + workload.UserText(seed, "reply:"+session, turn, tokens) + "\n")
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
