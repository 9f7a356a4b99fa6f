package workload

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"reflect"
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
		"header tail":   `{"v":1,"suite":"s","seed":1,"model":"m","mode":"open"} {"v":1}` + "\n",
		"two requests on a line": head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1}` +
			`{"i":1,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1}`,
		"stray text":          head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1} x`,
		"prefix without size": head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1,"prefix":"p"}`,
		"size without prefix": head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1,"prefix_tokens":3}`,
		"prefix on turn 2":    head + `{"i":0,"session":"s","turn":2,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1,"prefix":"p","prefix_tokens":3}`,
		"prefix of two sizes": head + `{"i":0,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1,"prefix":"p","prefix_tokens":3}` + "\n" +
			`{"i":1,"turn":1,"source":"none","endpoint":"chat","new_input_tokens":1,"output_tokens":1,"prefix":"p","prefix_tokens":4}`,
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

// FuzzRead: whatever Read accepts is valid request by request, holds one
// request per line after the header (lines counted here by splitting at
// LF), in index order, and survives Write and Read unchanged (an empty
// params object aside), with a second Write giving the same bytes: nothing
// read is dropped or altered.
func FuzzRead(f *testing.F) {
	var buf bytes.Buffer
	_ = sample().Write(&buf)
	f.Add(buf.String())
	f.Add("{}")
	f.Add(strings.ReplaceAll(buf.String(), "\n", "\r\n"))
	f.Add(strings.TrimSuffix(buf.String(), "\n"))
	f.Add(`{"v":1,"mode":"open"}` + "\n" + `{"turn":1,"source":"none","endpoint":"responses","new_input_tokens":1,"output_tokens":1}0`)
	f.Add(`{"v":1,"mode":"closed","workers":1,"pArAms":{ }}`)
	f.Fuzz(func(t *testing.T, in string) {
		w, err := Read(strings.NewReader(in))
		if err != nil {
			return
		}
		lines := strings.Split(strings.TrimSuffix(in, "\n"), "\n")
		if len(w.Requests) != len(lines)-1 {
			t.Fatalf("%d requests from %d lines after the header", len(w.Requests), len(lines)-1)
		}
		for i := range w.Requests {
			if err := w.Requests[i].Validate(&w.Header); err != nil {
				t.Fatalf("Read accepted an invalid request: %v", err)
			}
			// The first JSON value of the line: Read ignores bytes after it
			// (a line "{...}0" is accepted), which json.Unmarshal would not.
			var idx struct {
				Index int `json:"i"`
			}
			if err := json.NewDecoder(strings.NewReader(lines[i+1])).Decode(&idx); err != nil || idx.Index != i || w.Requests[i].Index != i {
				t.Fatalf("line %d %q read as request %+v (%v)", i+2, lines[i+1], w.Requests[i], err)
			}
		}
		var first, second bytes.Buffer
		if err := w.Write(&first); err != nil {
			t.Fatal(err)
		}
		again, err := Read(bytes.NewReader(first.Bytes()))
		if err != nil {
			t.Fatalf("Read of Write of an accepted workload: %v\n%s", err, first.String())
		}
		// An empty params object is written as none at all.
		if len(w.Header.Params) == 0 {
			w.Header.Params = nil
		}
		if !reflect.DeepEqual(again, w) {
			t.Fatalf("round trip changed the workload:\n%+v\n%+v", w, again)
		}
		if err := again.Write(&second); err != nil || !bytes.Equal(first.Bytes(), second.Bytes()) {
			t.Fatalf("a second Write differs (%v):\n%s\n%s", err, first.String(), second.String())
		}
	})
}

// TestKeylessConversationAndPrefixRoundTrip: a session with source none
// (a conversation linked by content only) and a shared prefix are valid
// and survive a write and a read.
func TestKeylessConversationAndPrefixRoundTrip(t *testing.T) {
	w := &Workload{Header: Header{Suite: "rag", Seed: 1, Model: "m", Mode: ModeOpen}, Requests: []Request{
		{Index: 0, Session: "c", Turn: 1, Source: SourceNone, Endpoint: "chat", NewInputTokens: 5, OutputTokens: 2, Prefix: "doc-1", PrefixTokens: 40},
		{Index: 1, AtMs: 10, Session: "c", Turn: 2, Source: SourceNone, Endpoint: "chat", NewInputTokens: 5, OutputTokens: 2},
		{Index: 2, AtMs: 20, Turn: 1, Source: SourceNone, Endpoint: "chat", NewInputTokens: 5, OutputTokens: 2, Prefix: "doc-1", PrefixTokens: 40},
	}}
	var buf bytes.Buffer
	if err := w.Write(&buf); err != nil {
		t.Fatal(err)
	}
	got, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Requests, w.Requests) {
		t.Fatalf("read back %+v", got.Requests)
	}
	// The prefix's text is fixed by the seed and its name alone.
	a := PrefixText(1, "doc-1", 40)
	if len(a) != 160 || a != PrefixText(1, "doc-1", 40) || a == PrefixText(1, "doc-2", 40) || a == PrefixText(2, "doc-1", 40) {
		t.Fatalf("PrefixText %q", a)
	}
	if m := string(PrefixMessage(1, "doc-1", 40)); m != "system:"+a+"\n" {
		t.Fatalf("PrefixMessage %q", m)
	}
}
