package roundtrip

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestDoHandsRedirectsBack: a 307 from the upstream comes back as it
// came, and its Location is never requested, where http.Client would
// re-send the POST there.
func TestDoHandsRedirectsBack(t *testing.T) {
	var followed atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		followed.Add(1)
	}))
	defer elsewhere.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.Redirect(w, r, elsewhere.URL+"/steal", http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, up.URL+"/v1/chat/completions", strings.NewReader(`{"prompt":"secret"}`))
	resp, err := Do(tr, req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != elsewhere.URL+"/steal" {
		t.Fatalf("got %d %q, want the 307 as it came", resp.StatusCode, resp.Header.Get("Location"))
	}
	if n := followed.Load(); n != 0 {
		t.Fatalf("the redirect was followed %d times", n)
	}
}

// TestDoErrorAsClient: a transport error reads as http.Client's and
// unwraps to the transport's own.
func TestDoErrorAsClient(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	for _, method := range []string{http.MethodPost, http.MethodGet, ""} {
		req, _ := http.NewRequest(method, "http://user:pw@"+addr+"/v1/models", nil)
		_, got := Do(tr, req)
		_, want := (&http.Client{Transport: tr}).Do(req)
		if got == nil || want == nil || got.Error() != want.Error() {
			t.Fatalf("%q: error %v, http.Client's %v", method, got, want)
		}
		var opErr *net.OpError
		if !errors.As(got, &opErr) {
			t.Fatalf("%q: %v does not unwrap to the dial error", method, got)
		}
	}
}
