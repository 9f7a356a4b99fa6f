package engineproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// An engine's redirect goes back to the hub as it came: the proxy sends
// requests through the transport, not an http.Client that would follow
// it (and replay the body to wherever the engine points).
func TestEngineRedirectRelayed(t *testing.T) {
	t.Parallel()
	up := newScripted(t, func(w http.ResponseWriter, r *http.Request, _ recorded) {
		if r.URL.Path == "/elsewhere" {
			okJSON(w, r, recorded{})
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	h := newHarness(t, up.srv.URL, options{})
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, h.srv.URL+"/v1/embeddings", strings.NewReader(`{"input":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = validHeaders("redirect-1")
	resp, err := h.client.Transport.RoundTrip(req) // the test's own client must not follow it either
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	h.waitServed(1)
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/elsewhere" {
		t.Fatalf("status %d, Location %q; want 307 to /elsewhere", resp.StatusCode, resp.Header.Get("Location"))
	}
	if got := up.received(); len(got) != 1 {
		t.Fatalf("the engine received %d requests, want 1 (the redirect not followed)", len(got))
	}
}

// The request to the engine is built from the base URL parsed once; it
// must be the request http.NewRequest makes from the concatenated URL, for
// every base and path, escaped or not.
func TestNewUpstreamRequestMatchesNewRequest(t *testing.T) {
	t.Parallel()
	cases := []struct{ base, target string }{
		{"http://e:8000", "/v1/chat/completions"},
		{"http://e:8000", "/v1/chat/completions?a=1&b=%20"},
		{"http://e:8000/prefix", "/v1/completions?"},
		{"https://user:pw@e", "/v1/x%2Fy"},
		{"http://e:", "/v1/embeddings"},
		{"http://[::1]:8000", "/v1/a%20b?q"},
		{"http://e/a%2Fb", "/v1/chat/completions"},
		{"http://e", "//v1//chat"},
		{"http://e", "/v1/caf%C3%A9"},
	}
	for _, c := range cases {
		compareUpstreamRequest(t, c.base, http.MethodPost, c.target)
	}
}

// compareUpstreamRequest compares newUpstreamRequest with http.NewRequest for a
// request to target (an origin-form request target) sent to base.
func compareUpstreamRequest(t *testing.T, base, method, target string) {
	t.Helper()
	in, err := http.NewRequestWithContext(context.Background(), method, "http://hub"+target, nil)
	if err != nil {
		return // not a request the HTTP/2 server would hand the proxy
	}
	cfg := Defaults()
	cfg.UpstreamBaseURL = base
	e := newPool(&cfg, NewMetrics(prometheus.NewRegistry())).engines[0]
	body := requestBody{b: []byte("{}")}
	got, gotErr := newUpstreamRequest(context.Background(), in, e, body)
	want, wantErr := http.NewRequestWithContext(context.Background(), in.Method, e.base+in.URL.RequestURI(), bytes.NewReader(body.b))
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%s %s on %s: error %v, want %v", method, target, base, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	if got.URL.String() != want.URL.String() || got.URL.RequestURI() != want.URL.RequestURI() || got.Host != want.Host ||
		got.Method != want.Method || got.ContentLength != want.ContentLength || got.URL.User.String() != want.URL.User.String() {
		t.Fatalf("%s %s on %s: URL %q (%q), host %q, method %q, length %d; want %q (%q), %q, %q, %d", method, target, base,
			got.URL, got.URL.RequestURI(), got.Host, got.Method, got.ContentLength,
			want.URL, want.URL.RequestURI(), want.Host, want.Method, want.ContentLength)
	}
	for _, rd := range []func() (io.ReadCloser, error){func() (io.ReadCloser, error) { return got.Body, nil }, got.GetBody} {
		b, err := rd()
		if err != nil {
			t.Fatal(err)
		}
		if all, _ := io.ReadAll(b); string(all) != "{}" {
			t.Fatalf("body %q, want {}", all)
		}
		_ = b.Close()
	}
}

// FuzzNewUpstreamRequest holds newUpstreamRequest to http.NewRequest's
// URL for any path and query the hub may send.
func FuzzNewUpstreamRequest(f *testing.F) {
	f.Add("http://e:8000", "/v1/chat/completions", "a=1")
	f.Add("http://e/p%2Fq", "/v1/x%2Fy", "")
	f.Add("http://e", "//x", "?")
	f.Add("http://%80:80", "/", "") // a decoded host that is not UTF-8: refused by configuration
	f.Fuzz(func(t *testing.T, base, path, query string) {
		base = strings.TrimRight(base, "/")
		if checkUpstreamURL(base) != nil || !utf8.ValidString(base) || !strings.HasPrefix(path, "/") {
			return // configuration refuses such a base; engine labels must be UTF-8
		}
		target := path
		if query != "" {
			target += "?" + query
		}
		compareUpstreamRequest(t, base, http.MethodPost, target)
	})
}

// The body buffer goes back to its pool only when the handler and every
// reader the transport was given have let go: an HTTP/1 transport may
// still be writing the body after the answer arrived.
func TestBodyBufferHeldByReaders(t *testing.T) {
	t.Parallel()
	want := strings.Repeat("x", 10<<10)
	rb, err := readBody(strings.NewReader(want), int64(len(want)), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	bb := rb.buf
	if bb == nil || bb.class != 1 || string(rb.b) != want {
		t.Fatalf("buffer %v, body of %d bytes", bb, len(rb.b))
	}
	rd := rb.reader()
	again, _ := rb.getBody()()
	rb.release() // the handler returns
	if n := bb.refs.Load(); n != 2 {
		t.Fatalf("references %d after the handler let go, want 2 (the readers)", n)
	}
	_ = rd.Close()
	_ = rd.Close() // a second Close must not release twice
	if n := bb.refs.Load(); n != 1 {
		t.Fatalf("references %d after one reader closed twice, want 1", n)
	}
	if b, _ := io.ReadAll(again); string(b) != want {
		t.Fatalf("the open reader reads %d bytes, want %d", len(b), len(want))
	}
	_ = again.Close()
	if n := bb.refs.Load(); n != 0 {
		t.Fatalf("references %d at the end, want 0", n)
	}
}

// A short body is not pooled: the transport writes it with the head in
// one write only when it is a *bytes.Reader (behind io.NopCloser).
func TestShortBodyNotPooled(t *testing.T) {
	t.Parallel()
	rb, err := readBody(strings.NewReader(`{"a":1}`), 7, 1<<20)
	if err != nil || rb.buf != nil || string(rb.b) != `{"a":1}` {
		t.Fatalf("buffer %v, body %q, err %v", rb.buf, rb.b, err)
	}
	again, _ := rb.getBody()()
	want := fmt.Sprintf("%T", io.NopCloser(bytes.NewReader(nil)))
	for _, rd := range []io.ReadCloser{rb.reader(), again} {
		if got := fmt.Sprintf("%T", rd); got != want {
			t.Fatalf("reader %s, want %s", got, want)
		}
		if b, _ := io.ReadAll(rd); string(b) != `{"a":1}` {
			t.Fatalf("reads %q", b)
		}
	}
}

func TestBodyClasses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int64
		want int
	}{{0, -1}, {4 << 10, -1}, {4<<10 + 1, 0}, {8 << 10, 0}, {8<<10 + 1, 1}, {256<<10 + 300, 19 - minPooledShift}, {1 << 20, 20 - minPooledShift}, {1<<20 + 1, -1}} {
		if got := classOf(c.n); got != c.want {
			t.Errorf("classOf(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	// A body longer than declared outgrows its class and is not pooled.
	rb, err := readBody(strings.NewReader(strings.Repeat("x", 50000)), 5000, 1<<20)
	if err != nil || len(rb.b) != 50000 || rb.buf != nil {
		t.Fatalf("len %d, buffer %v, err %v", len(rb.b), rb.buf, err)
	}
}
