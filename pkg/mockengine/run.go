package mockengine

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// run is the decode phase of one admitted request.
type run struct {
	e            *Engine
	g            *generation
	w            http.ResponseWriter
	ctx          context.Context
	requestID    string
	arrived      time.Time
	promptTokens int
	cachedTokens int
	tokens       []string
	finish       string // finish_reason once every token is out
	// drop is an injected fault: the connection is to be dropped once
	// dropAfter tokens are out (docs/mock-engine.md#fault-injection);
	// dropped says it happened, for the caller to drop it.
	drop      bool
	dropAfter int
	dropped   bool
}

// dropNow reports, once sent output tokens have been flushed, whether the
// injected drop is due: after dropAfter tokens, or after the last token
// when the output is shorter, so a drop fault always hits before the
// stream's last event.
func (r *run) dropNow(sent int) bool {
	if r.drop && sent >= min(r.dropAfter, len(r.tokens)) {
		r.dropped = true
	}
	return r.dropped
}

// firstTokenDelay is the base TTFT plus its deterministic jitter, scaled.
func (r *run) firstTokenDelay() time.Duration {
	c := &r.e.cfg
	return c.scale(c.TTFT + jitter(c.Seed, r.requestID, "ttft", c.TTFTJitter))
}

// tokenDelay is the pause before output token i (i >= 1), scaled.
func (r *run) tokenDelay(i int) time.Duration {
	c := &r.e.cfg
	return c.scale(c.TokenDelay + jitter(c.Seed, r.requestID, "decode-"+strconv.Itoa(i), c.DecodeJitter))
}

func (r *run) sleep(d time.Duration) bool {
	return clock.Sleep(r.e.clock, r.ctx.Done(), d)
}

// complete produces a non-streaming response after the whole modelled
// generation time and returns the tokens generated (0 if the client left).
func (r *run) complete() int {
	total := r.firstTokenDelay()
	for i := 1; i < len(r.tokens); i++ {
		total += r.tokenDelay(i)
	}
	// The first token exists after the TTFT part of the wait; observe it as
	// such so the histogram means the same in both modes.
	if !r.sleep(r.firstTokenDelay()) {
		return 0
	}
	r.e.metrics.ttft.Observe(r.e.clock.Since(r.arrived).Seconds())
	if !r.sleep(total - r.firstTokenDelay()) {
		return 0
	}
	if r.drop {
		// Nothing of a JSON answer is useful before its end: the whole
		// answer is lost.
		r.dropped = true
		return 0
	}
	n := len(r.tokens)
	r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, n, true)
	text := joinTokens(r.tokens)
	u := newUsage(r.promptTokens, r.cachedTokens, n)
	created := r.e.clock.Now().Unix()
	switch r.g.kind {
	case "responses":
		writeJSON(r.w, http.StatusOK, r.responseObject(created, true, text, n))
		return n
	case "completion":
		writeJSON(r.w, http.StatusOK, map[string]any{
			"id": r.requestID, "object": "text_completion", "created": created, "model": r.g.model,
			"choices": []map[string]any{{"index": 0, "text": text, "finish_reason": r.finish, "logprobs": nil}},
			"usage":   u,
		})
		return n
	}
	writeJSON(r.w, http.StatusOK, map[string]any{
		"id": r.requestID, "object": "chat.completion", "created": created, "model": r.g.model,
		"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": r.finish, "logprobs": nil}},
		"usage":   u,
	})
	return n
}

// stream sends the response as SSE, one flushed event per token, and
// returns the tokens that reached the client before it left.
func (r *run) stream() int {
	if r.g.kind == "responses" {
		return r.streamResponses()
	}
	rc, ok := r.startSSE()
	if !ok || r.dropNow(0) {
		return 0
	}
	created := r.e.clock.Now().Unix()
	send := func(payload any) bool {
		b, err := json.Marshal(payload)
		if err != nil {
			return false
		}
		buf := make([]byte, 0, len(b)+8)
		buf = append(buf, "data: "...)
		buf = append(buf, b...)
		buf = append(buf, "\n\n"...)
		if _, err := r.w.Write(buf); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	chunk := func(delta map[string]any, text *string, finish any) map[string]any {
		choice := map[string]any{"index": 0, "finish_reason": finish, "logprobs": nil}
		obj := "chat.completion.chunk"
		if r.g.kind == "completion" {
			obj = "text_completion"
			t := ""
			if text != nil {
				t = *text
			}
			choice["text"] = t
		} else {
			choice["delta"] = delta
		}
		return map[string]any{"id": r.requestID, "object": obj, "created": created, "model": r.g.model, "choices": []any{choice}}
	}

	if !r.sleep(r.firstTokenDelay()) {
		return 0
	}
	r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, 0, false)
	if r.g.kind == "chat" && !send(chunk(map[string]any{"role": "assistant", "content": ""}, nil, nil)) {
		return 0
	}
	sent := 0
	for i, tok := range r.tokens {
		if i > 0 && !r.sleep(r.tokenDelay(i)) {
			return sent
		}
		if !send(chunk(map[string]any{"content": tok}, &tok, nil)) {
			return sent
		}
		sent++
		if i == 0 {
			r.e.metrics.ttft.Observe(r.e.clock.Since(r.arrived).Seconds())
		}
		r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, sent, false)
		if r.dropNow(sent) {
			return sent
		}
	}
	if !send(chunk(map[string]any{}, nil, r.finish)) {
		return sent
	}
	r.e.stats.stats(r.requestID, r.g.model, r.promptTokens, sent, true)
	if r.g.includeUsage {
		obj := "chat.completion.chunk"
		if r.g.kind == "completion" {
			obj = "text_completion"
		}
		if !send(map[string]any{"id": r.requestID, "object": obj, "created": created, "model": r.g.model,
			"choices": []any{}, "usage": newUsage(r.promptTokens, r.cachedTokens, sent)}) {
			return sent
		}
	}
	if _, err := r.w.Write([]byte("data: [DONE]\n\n")); err == nil {
		_ = rc.Flush()
	}
	return sent
}

// startSSE sends the 200 head of an event stream at once; false means the
// client is gone.
func (r *run) startSSE() (*http.ResponseController, bool) {
	h := r.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	r.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(r.w)
	return rc, rc.Flush() == nil
}
