package tunnel

import (
	"bufio"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// This file is the only place that touches golang.org/x/net/http2, which
// v0.62 marks deprecated in favour of net/http's own HTTP/2. The design
// is the classic x/net ServeConn on a connection the pylon dialed itself,
// the variant whose latency, cancellation and failure detection were
// measured when the tunnel was designed; on Go 1.27 x/net maps these
// same types onto net/http. Keeping them here makes a later switch a
// one-file change.

// maxConcurrentStreams is far above x/net's default of 250: the hub's
// ClientConn is Strict, so a lower limit would queue requests on the hub,
// and every stream is one client request.
const maxConcurrentStreams = 1000

// h2Conn is one connection being served as HTTP/2.
type h2Conn struct {
	base    *http.Server
	serving chan struct{} // closed once ServeConn has registered the conn for Shutdown
	done    chan struct{} // closed when ServeConn has returned
}

// serveH2 starts serving conn as the HTTP/2 server in a new goroutine.
// baseCtx is the parent of every request context. Handler panics and
// protocol errors are logged through log.
func serveH2(baseCtx context.Context, conn net.Conn, h http.Handler, log *slog.Logger, pingInterval, pingTimeout time.Duration) (*h2Conn, error) {
	// No read or header timeouts: x/net ignores ReadHeaderTimeout, and a
	// ReadTimeout would cut long request bodies and SSE streams. The only
	// peer is the hub that accepted our handshake on a connection we dialed.
	base := &http.Server{ //nolint:gosec // G112: see above

		Handler:  h,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	//nolint:staticcheck // SA1019: see the file comment
	h2s := &http2.Server{
		MaxConcurrentStreams: maxConcurrentStreams,
		// Blackhole detection: without these neither side notices a peer
		// that vanished without FIN or RST: with x/net's defaults such a
		// connection stays open on both ends indefinitely.
		ReadIdleTimeout: max(pingInterval, 0),
		PingTimeout:     pingTimeout,
	}
	// ConfigureServer hooks the HTTP/2 server into base.Shutdown, which is
	// how a drain sends GOAWAY on this connection.
	if err := http2.ConfigureServer(base, h2s); err != nil { //nolint:staticcheck // SA1019: see the file comment
		return nil, err
	}
	c := &h2Conn{base: base, serving: make(chan struct{}), done: make(chan struct{})}
	// base.Shutdown only reaches connections ServeConn has registered, which
	// it does just before it reports the first state change; a Shutdown
	// before that would be lost and the drain would wait for DrainTimeout.
	var once sync.Once
	base.ConnState = func(net.Conn, http.ConnState) { once.Do(func() { close(c.serving) }) }
	if _, isTLS := conn.(interface{ ConnectionState() tls.ConnectionState }); !isTLS {
		conn = newBufferedConn(conn)
	}
	go func() {
		defer close(c.done)
		//nolint:staticcheck // SA1019: see the file comment
		h2s.ServeConn(conn, &http2.ServeConnOpts{Context: baseCtx, BaseConfig: base, Handler: h})
	}()
	return c, nil
}

// shutdown sends GOAWAY: the hub opens no new streams, and ServeConn
// returns once the open ones have finished. It does not wait for them.
func (c *h2Conn) shutdown(ctx context.Context) {
	select {
	case <-c.serving:
	case <-c.done:
		return
	}
	_ = c.base.Shutdown(ctx)
}

// bufferedConn is a plaintext tunnel connection read through a buffer.
// x/net's HTTP/2 server reads each frame straight from its connection, the
// 9-byte header and then the payload: two read syscalls per frame, six or
// more per proxied request. Through the buffer one read takes in every
// frame that has arrived. A TLS connection is left as it is: it already
// buffers whole records, and the server reads its ConnectionState.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

// bufferedConnSize holds a full default-sized frame (16 KiB) and its
// header; bufio reads larger payloads straight into the caller's buffer.
const bufferedConnSize = 16<<10 + 9

func newBufferedConn(c net.Conn) *bufferedConn {
	return &bufferedConn{Conn: c, r: bufio.NewReaderSize(c, bufferedConnSize)}
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
