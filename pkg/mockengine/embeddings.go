package mockengine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// embeddingRequest is the part of an embeddings request the engine models.
type embeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat *string         `json:"encoding_format"`
}

// embedding is a validated embeddings request: one entry per input, either
// text (tokenised by the mock's estimate) or a token-id array (counted by
// length).
type embedding struct {
	model  string
	texts  [][]byte // nil entry: a token-id input, counted by ids
	ids    []int    // token ids of each input, when texts[i] is nil
	base64 bool
}

// parseEmbeddings decodes and validates an embeddings body. input is a
// string, an array of strings, an array of token ids (one input) or an
// array of token-id arrays.
func parseEmbeddings(body []byte) (*embedding, *openai.Error) {
	var req embeddingRequest
	if e := openai.DecodeJSON(body, &req); e != nil {
		return nil, e
	}
	if e := checkModel(req.Model); e != nil {
		return nil, e
	}
	emb := &embedding{model: req.Model}
	if f := req.EncodingFormat; f != nil {
		switch *f {
		case "float":
		case "base64":
			emb.base64 = true
		default:
			return nil, openai.BadRequest("encoding_format", "invalid_value", "encoding_format must be \"float\" or \"base64\", got %q", *f)
		}
	}
	raw := bytes.TrimSpace(req.Input)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, openai.BadRequest("input", "missing_field", "field \"input\" is required")
	}
	add := func(text *string, ids int) {
		if text != nil {
			emb.texts = append(emb.texts, []byte(*text))
			emb.ids = append(emb.ids, 0)
			return
		}
		emb.texts = append(emb.texts, nil)
		emb.ids = append(emb.ids, ids)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		add(&s, 0)
		return emb, nil
	}
	bad := openai.BadRequest("input", "invalid_type", "field \"input\" must be a string, an array of strings, an array of token ids or an array of token-id arrays")
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, bad
	}
	if len(items) == 0 {
		return nil, openai.BadRequest("input", "missing_field", "field \"input\" must not be empty")
	}
	var ids []int64
	if err := json.Unmarshal(raw, &ids); err == nil {
		add(nil, len(ids))
		return emb, nil
	}
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err == nil {
			add(&s, 0)
			continue
		}
		var ids []int64
		if err := json.Unmarshal(it, &ids); err == nil && len(ids) > 0 {
			add(nil, len(ids))
			continue
		}
		return nil, openai.BadRequest(fmt.Sprintf("input[%d]", i), "invalid_type", "input[%d] must be a string or a non-empty array of token ids", i)
	}
	return emb, nil
}

// embeddingTokens counts the request's tokens with the mock's tokeniser: each
// text input as a prompt of its bytes, each token-id input by its length;
// at least 1 per input.
func (e *Engine) embeddingTokens(emb *embedding) int {
	total := 0
	for i, t := range emb.texts {
		n := emb.ids[i]
		if t != nil {
			n = e.kv.NewSequence(t).Tokens()
		}
		total += max(n, 1)
	}
	return total
}

// embeddingBase64 is two float32 zeros, little endian, base64-encoded: the
// fixed base64 vector upstream Stargate's mock engine answers, kept so
// clients tested against it see the same bytes.
const embeddingBase64 = "AAAAAAAAAAA="

// serveEmbeddings answers at once: admission is its only cost, and the
// running slot is held only while the handler runs
// (docs/mock-engine.md#embeddings).
func (e *Engine) serveEmbeddings(w http.ResponseWriter, r *http.Request) {
	arrived := e.clock.Now()
	body, oerr := openai.ReadBody(w, r, e.cfg.MaxBodyBytes)
	if oerr != nil {
		e.reject(w, oerr, "too_large")
		return
	}
	emb, oerr := parseEmbeddings(body)
	if oerr != nil {
		e.reject(w, oerr, "bad_request")
		return
	}
	requestID, ok := e.identify(r, "embeddings", "embedding", emb.model)
	if !ok {
		return
	}
	fault := e.control.nextFault()
	if e.injectBeforeRun(w, r, fault) {
		return
	}
	if fault.Mode == faultDrop {
		// An embeddings answer has no tokens to stream: it is lost whole.
		e.control.injected(faultDrop)
		panic(http.ErrAbortHandler)
	}
	tokens := e.embeddingTokens(emb)
	if !e.acquire(w, r) {
		return
	}
	defer e.slots.release()
	e.metrics.queueTime.Observe(e.clock.Since(arrived).Seconds())
	e.metrics.promptTokens.Add(float64(tokens))

	data := make([]map[string]any, len(emb.texts))
	for i := range data {
		var vec any = []float64{float64(i), float64(i) + 0.125, -float64(i) - 0.25}
		if emb.base64 {
			vec = embeddingBase64
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": vec}
	}
	e.stats.stats(requestID, emb.model, tokens, -1, true)
	w.Header().Set(headers.RequestID, requestID)
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list", "data": data, "model": emb.model,
		"usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}
