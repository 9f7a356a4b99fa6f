package estimate

import (
	"testing"

	"github.com/stargate-router/stargate/gateway/internal/request"
)

func TestText(t *testing.T) {
	for s, want := range map[string]int64{"": 0, "a": 6, "abcd": 6, "abcde": 7, "auto": 6} {
		if got := Text(s); got != want {
			t.Errorf("Text(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestInput(t *testing.T) {
	parse := func(e request.Endpoint, b string) *request.Request {
		r, oe := request.Parse(e, []byte(b))
		if oe != nil {
			t.Fatal(oe)
		}
		return r
	}
	// 3+2 per message, floor(len/4) for text content, est(name)+1.
	r := parse(request.Chat, `{"model":"m","messages":[{"role":"user","content":"hello world!","name":"bob"}],"user":"u"}`)
	if got, want := Input(r), 5+3+(Text("bob")+1)+Text("u"); got != want {
		t.Errorf("chat = %d, want %d", got, want)
	}
	r = parse(request.Responses, `{"model":"m","input":"hello world!","max_output_tokens":9}`)
	if got, want := Input(r), Text("auto")+5+3; got != want {
		t.Errorf("responses = %d, want %d", got, want)
	}
	if MaxOutput(r, 1) != 9 {
		t.Error("max output")
	}
	r = parse(request.Embeddings, `{"model":"m","input":["abcd","abcdefgh"]}`)
	if got := Input(r); got != Text("abcd")+Text("abcdefgh") {
		t.Errorf("embeddings = %d", got)
	}
	if MaxOutput(r, 1) != 1 {
		t.Error("default max output")
	}
}
