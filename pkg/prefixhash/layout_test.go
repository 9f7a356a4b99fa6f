package prefixhash

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// render writes one conversation through the layout, as both the engine
// (into a buffer) and the gateway (into a Hasher) do.
func render(w Writer) {
	WriteTools(w, []byte("  [{\"type\":\"function\"}]\n"))
	WriteMessage(w, "system", strings.Repeat("You are terse. ", 10))
	StartMessage(w, "user")
	_, _ = w.WriteString("look: ")
	_ = WriteRawJSON(w, []byte(`{"type":"image_url","image_url":{"url":"data:x<y>"}}`))
	EndMessage(w)
	_ = WriteItem(w, map[string]any{"type": "function_call", "arguments": "{}"})
	WriteMessage(w, ReplyRole, "ok")
}

func TestLayoutBytes(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	render(&b)
	want := `[{"type":"function"}]` + "\n" +
		"system:" + strings.Repeat("You are terse. ", 10) + "\n" +
		`user:look: {"image_url":{"url":"data:x\u003cy\u003e"},"type":"image_url"}` + "\n" +
		`{"arguments":"{}","type":"function_call"}` + "\n" +
		"assistant:ok\n"
	if b.String() != want {
		t.Fatalf("layout\n%q\nwant\n%q", b.String(), want)
	}
	// The gateway's Hasher sees exactly these bytes.
	h := NewHasher(DefaultBlockTokens, DefaultCharsPerToken)
	render(h)
	hashes, _ := AppendBlocks(nil, Seed, DefaultBlockBytes, nil, b.Bytes())
	if got, want := h.Summary(), Summarize(hashes, DefaultBlockTokens); !equalSummary(got, want) || h.Len() != b.Len() {
		t.Fatalf("Hasher of the layout = %+v (len %d), want %+v (len %d)", got, h.Len(), want, b.Len())
	}
}

func TestWriteToolsSkipsAbsent(t *testing.T) {
	t.Parallel()
	for _, tools := range []string{"", "  ", "null", " null\n"} {
		var b bytes.Buffer
		WriteTools(&b, []byte(tools))
		if b.Len() != 0 {
			t.Errorf("tools %q wrote %q", tools, b.String())
		}
	}
}

// TestWriteRawJSONIsDecodeEncode: however the client spelled a part, the
// layout holds encoding/json's encoding of its decoded value.
func TestWriteRawJSONIsDecodeEncode(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{ "type" : "image_url", "image_url": {"url": "x", "detail": "low"} }`,
		`{"b":1.50,"a":[1e3, -0.0, 12345678901234567890],"c":"\u00e9\u2028<&>"}`,
		`{"dup":1,"dup":2}`,
	} {
		var v any
		if err := json.Unmarshal([]byte(raw), &v); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(v)
		var b bytes.Buffer
		if err := WriteRawJSON(&b, []byte(raw)); err != nil || b.String() != string(want) {
			t.Fatalf("WriteRawJSON(%s) = %s, %v; want %s", raw, b.String(), err, want)
		}
	}
	var b bytes.Buffer
	if err := WriteRawJSON(&b, []byte(`{"a":`)); err == nil || b.Len() != 0 {
		t.Fatalf("bad JSON: wrote %q, err %v", b.String(), err)
	}
}

func TestIsTextPart(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]bool{"text": true, "input_text": true, "output_text": true, "image_url": false, "": false, "Text": false} {
		if IsTextPart(typ) != want {
			t.Errorf("IsTextPart(%q) = %v", typ, !want)
		}
	}
}
