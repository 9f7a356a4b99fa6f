package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
	"github.com/stargate-router/stargate/pkg/workload"
)

// Outcomes of a request.
const (
	OutcomeOK = "ok"
	// OutcomeError is a request that was sent and failed.
	OutcomeError = "error"
	// OutcomeSkipped is a later turn not sent because an earlier turn of
	// its session failed: its history would be wrong.
	OutcomeSkipped = "skipped"
	// OutcomeAborted is a request cut off by the run deadline.
	OutcomeAborted = "aborted"
)

// Record is the measurement of one request, one line of requests.jsonl.
type Record struct {
	Index    int    `json:"i"`
	Session  string `json:"session,omitempty"`
	Turn     int    `json:"turn"`
	Stream   string `json:"stream,omitempty"`
	Source   string `json:"source"`
	Endpoint string `json:"endpoint"`
	Worker   int    `json:"worker"`
	// AtMs is the scheduled open-loop offset; StartMs is when the first
	// attempt was actually sent, from the start of the run. For a later
	// turn StartMs can exceed AtMs by the time its previous turn took.
	AtMs    int64   `json:"at_ms"`
	StartMs float64 `json:"start_ms"`
	// TTFTMs is the time to the first content event; LatencyMs the time
	// to the end of the answer. Both include retries.
	TTFTMs    float64 `json:"ttft_ms"`
	LatencyMs float64 `json:"latency_ms"`
	// InputTokens is the estimate sent as x-input-tokens.
	InputTokens  int `json:"input_tokens"`
	PromptTokens int `json:"prompt_tokens"`
	CachedTokens int `json:"cached_tokens"`
	// CacheableTokens is this request's share of the run's cache ceiling:
	// the prompt tokens an unbounded prefix cache in the mock engine's
	// geometry would have found, because a request sent earlier in the
	// run (or the reply to one) already held them. No engine can report
	// more cached tokens for the run than the sum of these.
	CacheableTokens int `json:"cacheable_tokens"`
	// FleetNewBlocks and ClusterNewBlocks place this request's prompt for
	// the copies per block across clusters (Stats.CopiesPerBlock): of its
	// full KV blocks (the mock engine's blocks of the prompt as sent), how
	// many no earlier request of the run had sent to any cluster, and how
	// many its own cluster had not received before. Both are 0 for a
	// request that reached no known cluster.
	FleetNewBlocks   int    `json:"fleet_new_blocks"`
	ClusterNewBlocks int    `json:"cluster_new_blocks"`
	OutputTokens     int    `json:"output_tokens"`
	Usage            bool   `json:"usage"`
	Status           int    `json:"status"`
	Outcome          string `json:"outcome"`
	Error            string `json:"error,omitempty"`
	Retries          int    `json:"retries"`
	Cluster          string `json:"cluster,omitempty"`
	Server           string `json:"server,omitempty"`
	// Prefix is the shared prefix the request's conversation opened with
	// (workload.Request.Prefix, unsalted), on its first turn.
	Prefix string `json:"prefix,omitempty"`
}

// Sender sends one job; Client.Do is the real one, tests use fakes.
type Sender func(ctx context.Context, j *Job) Result

// Config bounds and labels one run.
type Config struct {
	// MaxRequests stops sending after that many requests; 0 = all.
	MaxRequests int
	// Timeout bounds each request (retries included); 0 = none.
	Timeout time.Duration
	// Deadline bounds the whole run; requests still running are aborted.
	// 0 = none.
	Deadline time.Duration
	// Salt is mixed into every session id and prompt text, so repeats of
	// one workload do not hit each other's caches; every arm of a
	// comparison uses the same salts.
	Salt string
	// BlockTokens is the KV block size (tokens) the run's cache ceiling
	// is counted in; 0 is the mock engine's default, 16.
	BlockTokens int
	// Clock schedules open-loop sends, the deadline and timeouts.
	Clock clock.Clock
	// Progress, when set, is told about every finished request.
	Progress *Progress
}

// Runner replays a workload.
type Runner struct {
	cfg  Config
	send Sender
}

// NewRunner returns a runner that sends through send.
func NewRunner(cfg Config, send Sender) *Runner {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	return &Runner{cfg: cfg, send: send}
}

// errDeadline and errTimeout are the causes of cancelled requests.
var (
	errDeadline = errors.New("aborted: run deadline reached")
	errTimeout  = errors.New("request timeout")
)

// session is one conversation's state. Its turns run one at a time: turn
// n waits for done of turn n-1, whose close publishes history.
type session struct {
	history []Message
	// blocks is history as the mock engine lays it out, cut into blocks
	// for the cache ceiling; extended by each turn, so each byte is hashed
	// once.
	blocks kvcache.Sequence
	failed bool
}

// Output is what a run produced: records in file order of the requests
// that were due (sent, skipped or aborted) and the wall-clock bounds.
type Output struct {
	Records  []Record
	Started  time.Time
	Finished time.Time
	// SendWindow is from the start to the last send.
	SendWindow time.Duration
}

// Run replays w. Open-loop requests go out at their AtMs offsets; closed
// loop runs Header.Workers workers over their own requests in file order.
// Either way a session's turn waits until its previous turn has finished,
// and re-sends the whole conversation (every earlier message and the
// actual reply).
func (r *Runner) Run(ctx context.Context, w *workload.Workload) (*Output, error) {
	clk := r.cfg.Clock
	ceiling, err := workload.NewCeilingCache(r.cfg.BlockTokens)
	if err != nil {
		return nil, fmt.Errorf("block size: %w", err)
	}
	copies := newCopyCounter(r.cfg.BlockTokens)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if r.cfg.Deadline > 0 {
		t := clk.AfterFunc(r.cfg.Deadline, func() { cancel(errDeadline) })
		defer t.Stop()
	}
	n := len(w.Requests)
	records := make([]Record, n)
	due := make([]bool, n)
	// Turn chains: waitFor[i] is closed when the previous turn of request
	// i's session has finished; done[i] when request i has.
	waitFor := make([]chan struct{}, n)
	done := make([]chan struct{}, n)
	sessions := map[string]*session{}
	last := map[string]chan struct{}{}
	worker := map[string]int{}
	for i := range w.Requests {
		done[i] = make(chan struct{})
		if s := w.Requests[i].Session; s != "" {
			// A closed-loop session must stay on one worker: a turn waiting
			// for a turn another worker never got to would wait forever.
			if wk, ok := worker[s]; ok && wk != w.Requests[i].Worker && w.Header.Mode == workload.ModeClosed {
				return nil, fmt.Errorf("workload request %d: session %q moves from worker %d to %d", i, s, wk, w.Requests[i].Worker)
			}
			worker[s] = w.Requests[i].Worker
			waitFor[i] = last[s]
			last[s] = done[i]
			if sessions[s] == nil {
				sessions[s] = &session{}
			}
		}
	}
	start := clk.Now()
	var lastSend atomic.Int64
	var claimed atomic.Int64
	claim := func() bool {
		return r.cfg.MaxRequests <= 0 || claimed.Add(1) <= int64(r.cfg.MaxRequests)
	}
	exec := func(i int) {
		defer close(done[i])
		req := &w.Requests[i]
		rec := &records[i]
		due[i] = true
		*rec = Record{Index: i, Session: req.Session, Turn: req.Turn, Stream: req.Stream, Source: req.Source,
			Endpoint: req.Endpoint, Worker: req.Worker, AtMs: req.AtMs, Prefix: req.Prefix}
		var s *session
		if req.Session != "" {
			s = sessions[req.Session]
			if waitFor[i] != nil {
				select {
				case <-waitFor[i]:
				case <-ctx.Done():
					rec.Outcome, rec.Error = OutcomeAborted, context.Cause(ctx).Error()
					r.cfg.Progress.done(rec, false)
					return
				}
			}
			if s.failed {
				rec.Outcome, rec.Error = OutcomeSkipped, "an earlier turn of the session failed"
				r.cfg.Progress.done(rec, false)
				return
			}
		}
		j := r.job(w, req, s)
		prompt, lease := ceilingLookup(ceiling, s, j)
		rec.CacheableTokens = lease.CachedTokens()
		rctx, rcancel := context.WithCancelCause(ctx)
		defer rcancel(nil)
		if r.cfg.Timeout > 0 {
			t := clk.AfterFunc(r.cfg.Timeout, func() { rcancel(errTimeout) })
			defer t.Stop()
		}
		sent := clk.Since(start)
		for {
			prev := lastSend.Load()
			if int64(sent) <= prev || lastSend.CompareAndSwap(prev, int64(sent)) {
				break
			}
		}
		r.cfg.Progress.sent()
		res := r.send(rctx, j)
		fill(rec, &res, sent)
		if rec.Cluster != "" && rec.Status >= 200 && rec.Status < 300 {
			rec.FleetNewBlocks, rec.ClusterNewBlocks = copies.count(rec.Cluster, prompt)
		}
		var reply []byte
		if res.OK() {
			reply = workload.MessageBytes("assistant", res.Reply)
		}
		lease.Release(reply)
		if rec.Outcome == OutcomeError && ctx.Err() != nil {
			// The run deadline or an interrupt cut it off: not the
			// target's failure.
			rec.Outcome, rec.Error = OutcomeAborted, context.Cause(ctx).Error()
		}
		if s != nil {
			if rec.Outcome == OutcomeOK {
				s.history = append(j.History, Message{Role: "user", Content: j.User}, Message{Role: "assistant", Content: res.Reply})
				s.blocks = prompt.Extend(reply)
			} else {
				s.failed = true
			}
		}
		r.cfg.Progress.done(rec, true)
	}

	var wg sync.WaitGroup
	if w.Header.Mode == workload.ModeOpen {
		for i := range w.Requests {
			if !claim() {
				break
			}
			at := start.Add(time.Duration(w.Requests[i].AtMs) * time.Millisecond)
			if !clock.Sleep(clk, ctx.Done(), at.Sub(clk.Now())) {
				break
			}
			wg.Go(func() { exec(i) })
		}
	} else {
		queues := make([][]int, w.Header.Workers)
		for i, req := range w.Requests {
			queues[req.Worker] = append(queues[req.Worker], i)
		}
		for _, q := range queues {
			wg.Go(func() {
				for _, i := range q {
					if ctx.Err() != nil || !claim() {
						return
					}
					exec(i)
				}
			})
		}
	}
	wg.Wait()
	out := &Output{Started: start, Finished: clk.Now(), SendWindow: time.Duration(lastSend.Load())}
	for i := range records {
		if due[i] {
			out.Records = append(out.Records, records[i])
		}
	}
	if len(out.Records) == 0 && ctx.Err() != nil {
		return out, fmt.Errorf("no request sent: %w", context.Cause(ctx))
	}
	return out, nil
}

// ceilingLookup counts request j against the run's cache ceiling: its
// prompt (the session's history and the new message, as the mock engine
// lays them out) is looked up in the unbounded cache and stored at once,
// when it is sent, which is never later than an engine could store it.
// The caller releases the lease with the reply once there is one, so the
// next turn finds it as the engine's cache would.
func ceilingLookup(kv *kvcache.Cache, s *session, j *Job) (kvcache.Sequence, *kvcache.Lease) {
	msg := workload.MessageBytes("user", j.User)
	var prompt kvcache.Sequence
	if s != nil && len(s.history) > 0 {
		prompt = s.blocks.Extend(msg)
	} else {
		// A first turn: only its opening (a shared prefix) comes before
		// the message.
		var b []byte
		for _, m := range j.History {
			b = append(b, workload.MessageBytes(m.Role, m.Content)...)
		}
		prompt = kv.NewSequence(append(b, msg...))
	}
	lease := kv.Lookup(prompt)
	lease.Commit()
	return prompt, lease
}

// job materialises request req: the salted session id, the history so far
// (on a first turn, its shared prefix) and this turn's text.
func (r *Runner) job(w *workload.Workload, req *workload.Request, s *session) *Job {
	j := &Job{Request: req, RequestID: fmt.Sprintf("loadgen-%s-%s-%d", w.Header.Suite, r.cfg.Salt, req.Index),
		User: workload.UserText(w.Header.Seed, r.salted(req.Session, req.Index), req.Turn, req.NewInputTokens)}
	if req.Session != "" {
		j.Session = r.salted(req.Session, req.Index)
		j.History = s.history
	}
	if req.Prefix != "" && len(j.History) == 0 {
		// Salted like a session id, so repeats under other salts share no
		// prefix with this run.
		text := workload.PrefixText(w.Header.Seed, r.salted(req.Prefix, req.Index), req.PrefixTokens)
		j.History = []Message{{Role: workload.PrefixRole, Content: text}}
	}
	return j
}

// salted is the name a run keys text by: name ("#<index>" for an
// anonymous request's "") behind the run's salt.
func (r *Runner) salted(name string, index int) string {
	if name == "" {
		name = fmt.Sprintf("#%d", index)
	}
	if r.cfg.Salt != "" {
		name = r.cfg.Salt + ":" + name
	}
	return name
}

// copyCounter counts how many clusters received each prompt block, for
// the copies per block across clusters: one unbounded cache in the
// engine's geometry holds every full prompt block sent to a known cluster
// (the fleet's), one per cluster those it received. Being unbounded, it
// counts a block a cluster received and later evicted as still there, so
// the copies it reports are an upper bound of the copies held at once.
type copyCounter struct {
	// mu makes one request's lookup and store atomic: two identical
	// prompts counted at once must not both find their blocks new.
	mu          sync.Mutex
	blockTokens int
	fleet       *kvcache.Cache
	clusters    map[string]*kvcache.Cache
}

func newCopyCounter(blockTokens int) *copyCounter {
	c := &copyCounter{blockTokens: blockTokens, clusters: map[string]*kvcache.Cache{}}
	// The runner checked the block size with its ceiling cache.
	c.fleet, _ = workload.NewCeilingCache(blockTokens)
	return c
}

// count stores prompt as received by cluster and returns how many of its
// full blocks were new to the fleet and new to the cluster.
func (c *copyCounter) count(cluster string, prompt kvcache.Sequence) (fleetNew, clusterNew int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kv := c.clusters[cluster]
	if kv == nil {
		kv, _ = workload.NewCeilingCache(c.blockTokens)
		c.clusters[cluster] = kv
	}
	return newBlocks(c.fleet, prompt), newBlocks(kv, prompt)
}

// newBlocks stores prompt's full blocks in kv (unbounded: it keeps every
// block) and returns how many were not there yet. Since kv holds whole
// prefixes only, those are the blocks after the longest cached prefix.
func newBlocks(kv *kvcache.Cache, prompt kvcache.Sequence) int {
	l := kv.Lookup(prompt)
	n := prompt.FullBlocks() - l.CachedTokens()/kv.Config().BlockTokens
	l.Commit()
	l.Release(nil)
	return n
}

// fill copies a result into its record.
func fill(rec *Record, res *Result, sent time.Duration) {
	rec.StartMs = ms(sent)
	rec.TTFTMs = ms(res.TTFT)
	rec.LatencyMs = ms(res.Latency)
	rec.InputTokens = res.InputTokens
	rec.PromptTokens = res.PromptTokens
	rec.CachedTokens = res.CachedTokens
	rec.OutputTokens = res.OutputTokens
	rec.Usage = res.Usage
	rec.Status = res.Status
	rec.Retries = res.Retries
	rec.Cluster = res.Cluster
	rec.Server = res.Server
	rec.Outcome = OutcomeOK
	if !res.OK() {
		rec.Outcome = OutcomeError
		rec.Error = res.Err
		if rec.Error == "" {
			rec.Error = fmt.Sprintf("HTTP %d", res.Status)
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
