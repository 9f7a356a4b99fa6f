package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"strings"
	"testing"
)

func sample() *Workload {
	return &Workload{
		Header: Header{Suite: "smoke", Seed: 7, Model: "m", Mode: ModeClosed, Workers: 2, Params: map[string]any{"b": 1, "a": "x"}},
		Requests: []Request{
			{Index: 0, Worker: 0, Session: "s1", Turn: 1, Source: SourcePromptCacheKey, Endpoint: "chat", NewInputTokens: 100, OutputTokens: 8},
			{Index: 1, Worker: 1, Turn: 1, Source: SourceNone, Endpoint: "responses", NewInputTokens: 5, OutputTokens: 1},
			{Index: 2, Worker: 0, Session: "s1", Turn: 2, Source: SourcePromptCacheKey, Endpoint: "chat", NewInputTokens: 20, OutputTokens: 8},
		},
	}
}

func TestRoundTripAndFingerprint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.jsonl")
	fp, err := sample().WriteFile(path)
	if err != nil {
		t.Fatal(err)
	}
	w, fp2, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if fp != fp2 || len(fp) != 64 {
		t.Fatalf("fingerprints %s and %s", fp, fp2)
	}
	if len(w.Requests) != 3 || w.Requests[2].Turn != 2 || w.Header.V != Version {
		t.Fatalf("read back %+v", w)
	}
	// Writing what was read gives the same bytes: the fingerprint is of
	// the workload, not of one encoder run.
	var buf bytes.Buffer
	if err := w.Write(&buf); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	if hex.EncodeToString(sum[:]) != fp {
		t.Fatal("re-encoding changed the bytes")
	}
}

func TestReadRejects(t *testing.T) {
	head := `{"v":1,"suite":"s","seed":1,"model":"m","mode":"open"}` + "\n"
	for name, in := range map[string]string{
		"empty":         "",
		"version":       `{"v":2,"suite":"s","seed":1,"model":"m","mode":"open"}`,
		"mode":          `{"v":1,"suite":"s","seed":1,"model":"m","mode":"burst"}`,
		"unknown field": head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1,"x":1}`,
		"index gap":     head + `{"i":1,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1}`,
		"anon turn 2":   head + `{"i":0,"turn":2,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1}`,
		"no tokens":     head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":0,"output_tokens":1}`,
		"endpoint":      head + `{"i":0,"turn":1,"source":"none","endpoint":"embeddings","new_input_tokens":1,"output_tokens":1}`,
		"source":        head + `{"i":0,"session":"s","turn":1,"source":"cookie","endpoint":"chat","new_input_tokens":1,"output_tokens":1}`,
	} {
		if _, err := Read(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestUserText(t *testing.T) {
	a := UserText(1, "s1", 1, 100)
	if len(a) != 100*CharsPerToken {
		t.Fatalf("%d bytes for 100 tokens", len(a))
	}
	if a != UserText(1, "s1", 1, 100) {
		t.Fatal("not deterministic")
	}
	for _, other := range []string{UserText(2, "s1", 1, 100), UserText(1, "s2", 1, 100), UserText(1, "s1", 2, 100)} {
		if other[:16] == a[:16] {
			t.Fatalf("distinct messages share their first bytes: %q %q", a[:16], other[:16])
		}
	}
	if got := UserText(1, "s", 1, 1); len(got) != CharsPerToken {
		t.Fatalf("1 token is %q", got)
	}
}

func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = sample().Write(&buf)
	f.Add(buf.String())
	f.Add("{}")
	f.Fuzz(func(t *testing.T, in string) {
		w, err := Read(strings.NewReader(in))
		if err != nil {
			return
		}
		for i := range w.Requests {
			if err := w.Requests[i].Validate(&w.Header); err != nil {
				t.Fatalf("Read accepted an invalid request: %v", err)
			}
		}
	})
}
