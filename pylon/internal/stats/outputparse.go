package stats

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"unicode"
	"unicode/utf8"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// chunkTokens is what one response chunk says about output tokens
// (docs/design/statistics.md#openai-fallback).
type chunkTokens struct {
	// explicit is a cumulative counter from usage.completion_tokens,
	// output_tokens_so_far or response.usage.output_tokens (first found, in
	// that order); hasExplicit reports that one was present.
	explicit    uint64
	hasExplicit bool
	// words counts whitespace-separated words in choices[].delta.content
	// (summed over choices) and in a top-level string delta.
	words uint64
}

// isOutputPayload reports whether an SSE data payload (or a non-SSE body)
// counts as output: "[DONE]", empty data and response.created are not
// output; anything else is, whether or not it parses, so an engine whose
// chunks this parser does not understand still shows progress.
func isOutputPayload(p []byte) bool {
	p = bytes.TrimSpace(p)
	if len(p) == 0 || bytes.Equal(p, []byte("[DONE]")) {
		return false
	}
	// Only an object that names response.created needs decoding; one with
	// a \u escape might spell it in escapes (no shorter escape stands for
	// its letters or its dot), so a line break or a quote in the text does
	// not send a chunk to encoding/json.
	if p[0] != '{' || (!bytes.Contains(p, []byte("response.created")) && !bytes.Contains(p, []byte(`\u`))) {
		return true
	}
	var head struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(p, &head) == nil && head.Type == "response.created" {
		return false
	}
	return true
}

// chunkShape is the part of an OpenAI chunk the parser reads. Key matching
// is encoding/json's (case-insensitive), which OpenAI-compatible engines
// never exercise.
type chunkShape struct {
	Usage             json.RawMessage `json:"usage"`
	OutputTokensSoFar json.RawMessage `json:"output_tokens_so_far"`
	Response          json.RawMessage `json:"response"`
	Choices           []struct {
		Delta struct {
			Content json.RawMessage `json:"content"`
		} `json:"delta"`
	} `json:"choices"`
	Delta json.RawMessage `json:"delta"`
}

// parseChunk reads the output-token information of one chunk. Anything it
// cannot read contributes nothing; it never fails. A field of an unexpected
// kind, or a counter above MaxCounterTokens, is skipped and the rest of the
// chunk still counts.
func parseChunk(p []byte) chunkTokens {
	// It runs for every SSE event and every non-SSE answer, so the chunk
	// is read in place; decodeChunk, which decoding with encoding/json
	// into chunkShape defines, handles what scanChunk leaves to it.
	c, words, ok := scanChunk(p)
	if !ok {
		if c, words, ok = decodeChunk(p); !ok {
			return chunkTokens{}
		}
	}
	// A counter above MaxCounterTokens is no count an engine can have: it
	// is skipped like a counter of the wrong kind.
	if v, ok := rawFieldU64(c.Usage, "completion_tokens"); ok && v <= MaxCounterTokens {
		return chunkTokens{explicit: v, hasExplicit: true}
	}
	if v, ok := rawU64(c.OutputTokensSoFar); ok && v <= MaxCounterTokens {
		return chunkTokens{explicit: v, hasExplicit: true}
	}
	if len(c.Response) > 0 {
		var r struct {
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal(c.Response, &r) == nil {
			if v, ok := rawFieldU64(r.Usage, "output_tokens"); ok && v <= MaxCounterTokens {
				return chunkTokens{explicit: v, hasExplicit: true}
			}
		}
	}
	out := chunkTokens{words: words}
	if n, ok := rawWords(c.Delta); ok {
		out.words += n
	}
	return out
}

// decodeChunk decodes p into c with encoding/json and counts the words of
// c.Choices' delta contents; ok is false when p is not JSON.
func decodeChunk(p []byte) (c chunkShape, words uint64, ok bool) {
	if err := json.Unmarshal(p, &c); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return chunkShape{}, 0, false
		}
	}
	for _, ch := range c.Choices {
		if s, ok := rawString(ch.Delta.Content); ok {
			words += countWords(s)
		}
	}
	c.Choices = nil
	return c, words, true
}

// scanChunk is decodeChunk without decoding: the same members found in
// place, with encoding/json's rules for what it handles (case-insensitive
// keys, the last of duplicate keys winning, a member of the wrong kind
// ignored, a non-object document giving nothing). It reports false, for
// decodeChunk to decide, on invalid JSON, on keys that are escaped or not
// ASCII (encoding/json folds some non-ASCII letters onto ASCII ones), and
// on a repeated choices or delta, which encoding/json merges into the
// first one's values.
func scanChunk(p []byte) (c chunkShape, words uint64, ok bool) {
	ok = true
	var choices []byte
	nChoices := 0
	valid, plain := jsonscan.ValidMembers(p, func(k, v []byte) {
		switch {
		case !jsonscan.ASCII(k):
			ok = false
		case jsonscan.KeyIs(k, "usage"):
			c.Usage = v
		case jsonscan.KeyIs(k, "output_tokens_so_far"):
			c.OutputTokensSoFar = v
		case jsonscan.KeyIs(k, "response"):
			c.Response = v
		case jsonscan.KeyIs(k, "delta"):
			c.Delta = v
		case jsonscan.KeyIs(k, "choices"):
			choices = v
			nChoices++
		}
	})
	if !valid || (!plain && p[jsonscan.SkipSpace(p, 0)] == '{') {
		return chunkShape{}, 0, false
	}
	if !ok || nChoices > 1 {
		return chunkShape{}, 0, false
	}
	jsonscan.EachElement(choices, func(choice []byte) {
		var delta []byte
		nDelta := 0
		if !jsonscan.EachMember(choice, func(k, v []byte) {
			switch {
			case !jsonscan.ASCII(k):
				ok = false
			case jsonscan.KeyIs(k, "delta"):
				delta = v
				nDelta++
			}
		}) && choice[0] == '{' {
			ok = false
		}
		var content []byte
		if !jsonscan.EachMember(delta, func(k, v []byte) {
			switch {
			case !jsonscan.ASCII(k):
				ok = false
			case jsonscan.KeyIs(k, "content"):
				content = v
			}
		}) && len(delta) > 0 && delta[0] == '{' {
			ok = false
		}
		if nDelta > 1 {
			ok = false
		}
		if n, sok := rawWords(content); sok {
			words += n
		}
	})
	if !ok {
		return chunkShape{}, 0, false
	}
	return c, words, true
}

// rawFieldU64 reads obj[key] as an unsigned integer when obj is a JSON
// object.
func rawFieldU64(obj json.RawMessage, key string) (uint64, bool) {
	obj = bytes.TrimSpace(obj)
	if len(obj) == 0 || obj[0] != '{' || !jsonscan.Valid(obj) {
		return 0, false
	}
	// Decoding the object into a map, as this did, allocated the map and a
	// copy of every value on each response; reading it in place finds the
	// same value (the last of duplicate keys, as in a map).
	var val []byte
	if !jsonscan.EachMember(obj, func(k, v []byte) {
		if string(k) == key {
			val = v
		}
	}) {
		var m map[string]json.RawMessage
		if json.Unmarshal(obj, &m) != nil {
			return 0, false
		}
		val = m[key]
	}
	return rawU64(val)
}

// rawU64 reads a JSON non-negative integer literal.
func rawU64(raw json.RawMessage) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] < '0' || raw[0] > '9' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(raw), 10, 64)
	return v, err == nil
}

// rawString reads a JSON string. Strings without escapes are converted
// directly; the rest go through encoding/json.
func rawString(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && bytes.IndexByte(body, '"') < 0 && utf8.Valid(body) {
		return string(body), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// rawWords counts the words of a JSON string; ok is false for any other
// value. A string without escapes is counted where it lies: the engine
// sends one per token.
func rawWords(raw json.RawMessage) (uint64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) >= 2 && raw[0] == '"' {
		if body := raw[1 : len(raw)-1]; bytes.IndexByte(body, '\\') < 0 && bytes.IndexByte(body, '"') < 0 && utf8.Valid(body) {
			n, in := uint64(0), false
			for _, r := range string(body) { // ranging over the conversion does not copy
				if unicode.IsSpace(r) {
					in = false
				} else if !in {
					n++
					in = true
				}
			}
			return n, true
		}
	}
	s, ok := rawString(raw)
	if !ok {
		return 0, false
	}
	return countWords(s), true
}

// countWords counts maximal runs of non-whitespace, as strings.Fields would,
// without allocating.
func countWords(s string) uint64 {
	var n uint64
	in := false
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		if unicode.IsSpace(r) {
			in = false
			continue
		}
		if !in {
			n++
			in = true
		}
	}
	return n
}
