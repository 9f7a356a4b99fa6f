package mockengine

import (
	"encoding/json"
	"sync"
)

// statsEvent is one line of the engine stats stream
// (docs/mock-engine.md#engine-stats-stream, read by pylon as
// docs/design/statistics.md#engine-stats-stream describes). Counters are
// cumulative per request.
type statsEvent struct {
	Type            string  `json:"type"`
	V               int     `json:"v"`
	RequestID       string  `json:"request_id,omitempty"`
	Model           string  `json:"model,omitempty"`
	TokensProcessed *uint64 `json:"tokens_processed,omitempty"`
	TokensGenerated *uint64 `json:"tokens_generated,omitempty"`
	Finished        bool    `json:"finished,omitempty"`
}

// subscriberBuffer is the per-subscriber backlog; a subscriber that falls
// further behind skips events rather than slowing requests, as upstream
// Stargate's mock engine does.
const subscriberBuffer = 1024

// broadcaster fans stats lines out to every open stream. Nothing sent before
// a subscription is replayed.
type broadcaster struct {
	mu   sync.Mutex
	subs map[chan []byte]struct{}
	// poison, when set, says how to corrupt or withhold events
	// (test control's statistics poison).
	poison func() statsPoison
}

func newBroadcaster() *broadcaster {
	return &broadcaster{subs: make(map[chan []byte]struct{})}
}

func (b *broadcaster) subscribe() chan []byte {
	ch := make(chan []byte, subscriberBuffer)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	return ch
}

func (b *broadcaster) unsubscribe(ch chan []byte) {
	b.mu.Lock()
	delete(b.subs, ch)
	b.mu.Unlock()
}

// active reports whether anyone listens, so requests skip encoding events
// nobody reads.
func (b *broadcaster) active() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs) > 0
}

// stats publishes a stats event; generated < 0 leaves tokens_generated out
// (embeddings).
func (b *broadcaster) stats(requestID, model string, processed, generated int, finished bool) {
	if !b.active() {
		return
	}
	poison := poisonNone
	if b.poison != nil {
		poison = b.poison()
	}
	var line []byte
	switch poison {
	case poisonStale:
		return
	case poisonNone:
		p := uint64(processed)
		ev := statsEvent{Type: "stats", V: 1, RequestID: requestID, Model: model, TokensProcessed: &p, Finished: finished}
		if generated >= 0 {
			g := uint64(generated)
			ev.TokensGenerated = &g
		}
		line, _ = json.Marshal(ev)
	default:
		line = poisonedStats(poison, requestID, model, processed, generated, finished)
	}
	line = append(line, '\n')
	b.mu.Lock()
	defer b.mu.Unlock()
	for ch := range b.subs {
		select {
		case ch <- line:
		default: // lagging subscriber: drop, never block a request
		}
	}
}

var pingLine = []byte(`{"type":"ping","v":1}` + "\n")

// poisonedStats is a stats event whose counters are rendered as poison
// says, written by hand since encoding/json cannot write NaN or a
// negative uint64.
func poisonedStats(poison statsPoison, requestID, model string, processed, generated int, finished bool) []byte {
	id, _ := json.Marshal(requestID)
	m, _ := json.Marshal(model)
	b := append([]byte(`{"type":"stats","v":1,"request_id":`), id...)
	b = append(b, `,"model":`...)
	b = append(b, m...)
	b = append(b, `,"tokens_processed":`...)
	b = append(b, poisonNumber(poison, uint64(max(processed, 0)))...)
	if generated >= 0 {
		b = append(b, `,"tokens_generated":`...)
		b = append(b, poisonNumber(poison, uint64(generated))...)
	}
	if finished {
		b = append(b, `,"finished":true`...)
	}
	return append(b, '}')
}
