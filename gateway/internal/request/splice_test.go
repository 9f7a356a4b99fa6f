package request

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// FuzzSplice: for any JSON object, the spliced body is valid JSON that
// decodes (as the hub's encoding/json reads it, a repeated key's last
// value winning) to the original with exactly the requested changes:
// stream true, stream_options.include_usage true with its other members
// kept, the model replaced. A body splice leaves to Rewrite's parse is
// one with a key written with escapes at its top level or, when usage is
// set, in its stream_options.
func FuzzSplice(f *testing.F) {
	for _, s := range []string{
		`{"model":"fn/m","stream":false,"stream_options":{"x":1},"keep":[1],"prompt":"p"}`,
		`{"model":"m","messages":[{"role":"user","content":"a\u00e9\n \"}{]["}]}`,
		` { "model" : "m" , "stream_options" : null , "stream" : null } `,
		`{"model":"m","stream_options":{"include_usage":false,"include_usage":false}}`,
		`{"model":"m","stream":true,"stream":false}`,
		`{}`,
		`{"stream_options":{},"x":{"y":[{"z":"}"}]}}`,
		`{"str\u0065am":false}`,
		`{"model":"m","stream_options":{"include\u005fusage":false}}`,
	} {
		f.Add([]byte(s), true, true, "routed/m")
	}
	f.Fuzz(func(t *testing.T, body []byte, force, usage bool, model string) {
		if !json.Valid(body) || !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
			return
		}
		out, ok := splice(body, force, usage, model)
		if !ok {
			if !escapedKey(body, usage) {
				t.Fatalf("%q: refused without an escaped key", body)
			}
			return
		}
		var got, want map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q spliced to invalid JSON %q: %v", body, out, err)
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		if force {
			want["stream"] = true
		}
		if usage {
			so, _ := want["stream_options"].(map[string]any)
			if so == nil {
				so = map[string]any{}
			}
			so["include_usage"] = true
			want["stream_options"] = so
		}
		if model != "" {
			var m string
			_ = json.Unmarshal(appendString(nil, model), &m)
			want["model"] = m
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q spliced to %q:\n got %v\nwant %v", body, out, got, want)
		}
		if !force && !usage && model == "" && !bytes.Equal(out, body) {
			t.Fatalf("%q changed to %q with nothing to change", body, out)
		}
	})
}

// escapedKey reports whether body has a key written with escapes at its
// top level or, with usage, in its stream_options object.
func escapedKey(body []byte, usage bool) bool {
	found := false
	jsonscan.Members(body, func(key []byte, start, end int) bool {
		found = found || bytes.IndexByte(key, '\\') >= 0
		if usage && string(key) == "stream_options" && body[start] == '{' {
			found = found || escapedKey(body[start:end], false)
		}
		return true
	})
	return found
}

// TestRewriteKeepsBytes: a rewrite changes only the members it sets;
// the client's whitespace and escapes elsewhere reach the hub unchanged.
func TestRewriteKeepsBytes(t *testing.T) {
	in := `{ "model": "m",  "messages": [{"role":"user","content":"a\u00e9\/"}], "stream": false }`
	out, err := Rewrite([]byte(in), true, true, "")
	if err != nil {
		t.Fatal(err)
	}
	want := `{ "model": "m",  "messages": [{"role":"user","content":"a\u00e9\/"}], "stream": true ,"stream_options":{"include_usage":true}}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	// A top-level key written with escapes takes the parse, and is still set.
	out, err = Rewrite([]byte(`{"model":"m","str\u0065am":false}`), true, false, "")
	if err != nil || !json.Valid(out) || !bytes.Contains(out, []byte(`"stream":true`)) {
		t.Fatalf("%s %v", out, err)
	}
}
