package tunnel

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"golang.org/x/net/http2"
)

// teeConn records every byte read from it.
type teeConn struct {
	net.Conn
	mu  sync.Mutex
	got bytes.Buffer
}

func (c *teeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.got.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

func (c *teeConn) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.got.Bytes())
}

// The hub's requests are encoded without HPACK's dynamic table: each
// carries a new request id that would push older entries out, and keeping
// that table cost the hub more than the bytes it saved. So a request sent
// twice takes as many header bytes the second time as the first, where a
// dynamic table would send the second as a few indexes.
func TestRequestHeadersNotIndexed(t *testing.T) {
	t.Parallel()
	hubSide, pylonSide := net.Pipe()
	rec := &teeConn{Conn: pylonSide}
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		//nolint:staticcheck // SA1019: as in h2.go
		(&http2.Server{}).ServeConn(rec, &http2.ServeConnOpts{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		})})
	}()
	cc, err := newH2Client(0, 0).newClientConn(hubSide)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		req := newRequest(context.Background(), t, http.MethodPost, "/v1/chat/completions", "{}")
		req.Header["x-request-id"] = []string{"r-0123456789abcdef"}
		req.Header["x-model"] = []string{"bench-model"}
		req.Header["x-input-tokens"] = []string{"263"}
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	_ = cc.Close()
	<-srvDone

	sent := rec.bytes()
	if !bytes.HasPrefix(sent, []byte(http2.ClientPreface)) {
		t.Fatalf("no client preface in %q", sent)
	}
	fr := http2.NewFramer(io.Discard, bytes.NewReader(sent[len(http2.ClientPreface):]))
	var blocks []int
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if h, ok := f.(*http2.HeadersFrame); ok {
			blocks = append(blocks, len(h.HeaderBlockFragment()))
		}
	}
	if len(blocks) != 2 {
		t.Fatalf("header blocks %v; want 2", blocks)
	}
	// The first block may open with a table size update (a byte or two).
	if blocks[1] < blocks[0]-2 {
		t.Errorf("header block sizes %v: the second request was indexed against the first", blocks)
	}
}
