package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
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
	// rendered as the mock engine renders chat ("role:content\n").
	prompt kvcache.Sequence
	tokens int
	// affinity is the gateway's x-cache-affinity-key.
	affinity string
	// session is the gateway's last-cluster key: the session id when its
	// source is eligible (prompt_cache_key, conversation, header), else "".
	session string
}

// Prepare renders every prompt of w once. The block size must be the
// fleet's (every engine shares one cache geometry).
func Prepare(w *workload.Workload, fingerprint string, blockTokens int) (*Prepared, error) {
	geom, err := kvcache.New(kvcache.Config{BlockTokens: blockTokens, CharsPerToken: workload.CharsPerToken})
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
		seq  kvcache.Sequence
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
			pr.affinity = "mt:v1:payload:" + sha256Hex(pr.text)
		} else {
			pr.text = r.Session
			pr.affinity = "mt:v1:session:" + sha256Hex(r.Session)
			switch r.Source {
			case workload.SourcePromptCacheKey, workload.SourceConversation, workload.SourceHeader:
				pr.session = r.Session
			}
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
		msg := userMessage(seed, pr.text, r.Turn, r.NewInputTokens)
		if h == nil {
			pr.prompt = geom.NewSequence(msg)
		} else {
			if h.turn == 0 {
				pr.prompt = geom.NewSequence(msg)
			} else {
				pr.prompt = h.seq.Extend(msg)
			}
			h.seq = pr.prompt.Extend(replyMessage(seed, pr.text, r.Turn, r.OutputTokens))
			h.turn = r.Turn
		}
		pr.tokens = pr.prompt.Tokens()
		if p.workers != nil {
			p.workers[r.Worker] = append(p.workers[r.Worker], i)
		}
	}
	return p, nil
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
