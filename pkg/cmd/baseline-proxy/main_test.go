package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestRunRejectsABadTarget(t *testing.T) {
	for _, target := range []string{"", "127.0.0.1:8090", "http://", "::"} {
		err := run([]string{"--listen", "127.0.0.1:0", "--target", target})
		if err == nil || !strings.Contains(err.Error(), "--target") {
			t.Errorf("--target %q: got %v, want an error naming --target", target, err)
		}
	}
}

// The relay forwards a body it has read whole, with its length, even when
// the client streamed it in chunks: the engine's answer can then never
// race the inbound body's end.
func TestRelayBuffersTheBody(t *testing.T) {
	want := strings.Repeat("x", 70000)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.ContentLength != int64(len(want)) || len(r.TransferEncoding) != 0 || string(b) != want {
			http.Error(w, "not buffered", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer upstream.Close()
	u, err := url.Parse(upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(relay(u))
	defer front.Close()
	// An io.Reader of unknown length makes the client send chunks.
	resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", io.MultiReader(strings.NewReader(want)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(got) != "data: [DONE]\n\n" {
		t.Fatalf("status %d body %q", resp.StatusCode, got)
	}
}
