package tunnel

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"
)

// This file is the only place that touches golang.org/x/net/http2, which
// v0.62 marks deprecated in favour of net/http's own HTTP/2. The tunnel is
// the classic x/net ClientConn over a connection the hub already holds:
// that is the implementation its streaming, cancellation and failure
// behaviour was measured with on Go 1.26. On Go 1.27 x/net maps these same
// types onto net/http. Keeping them behind clientConn makes a later switch
// to http.Transport.NewClientConn a one-file change.

// clientConn is what a session needs from its HTTP/2 client connection.
type clientConn interface {
	http.RoundTripper
	// Close closes the connection at once, failing in-flight streams.
	Close() error
	// Shutdown sends GOAWAY and waits for in-flight streams or ctx.
	Shutdown(ctx context.Context) error
	// StreamsActive is the number of open streams, for /debug/state.
	StreamsActive() int
}

// h2Client makes clientConns with the tunnel's settings.
type h2Client struct {
	t *http2.Transport //nolint:staticcheck // SA1019: see the file comment
}

// newH2Client configures the HTTP/2 client side. pingInterval ≤ 0 disables
// the keepalive PINGs.
func newH2Client(pingInterval, pingTimeout time.Duration) h2Client {
	//nolint:staticcheck // SA1019: see the file comment
	return h2Client{t: &http2.Transport{
		// A bare ClientConn cannot open a second connection, so without
		// Strict a request over the pylon's stream limit fails at once
		// ("client conn not usable") instead of waiting its turn.
		StrictMaxConcurrentStreams: true,
		// Blackhole detection: with x/net's defaults neither side ever
		// notices a peer that vanished without FIN or RST.
		ReadIdleTimeout: max(pingInterval, 0),
		PingTimeout:     pingTimeout,
		// The tunnel is transparent: the proxy forwards the client's own
		// Accept-Encoding, and an added gzip would be undone here, which
		// also buffers SSE.
		DisableCompression: true,
		// No HPACK dynamic table for requests (1 byte holds no entry; 0
		// would mean x/net's default of 4096). Every request carries a
		// new x-request-id, and with a session key one of many affinity
		// keys, so each one added entries that pushed older ones out: the
		// table's upkeep (adding and evicting, with their map updates) was
		// 5-6 % of the hub's CPU, more than writing every header as a
		// literal costs, for about 170 bytes per request on a local link.
		MaxEncoderHeaderTableSize: 1,
	}}
}

// newClientConn starts HTTP/2 as the client on conn: it writes the client
// preface and SETTINGS at once. A plaintext conn is corked (corkConn).
func (c h2Client) newClientConn(conn net.Conn) (clientConn, error) {
	if _, isTLS := conn.(interface{ ConnectionState() tls.ConnectionState }); !isTLS {
		conn = newCorkConn(conn)
	}
	cc, err := c.t.NewClientConn(conn) //nolint:staticcheck // SA1019: see the file comment
	if err != nil {
		return nil, err
	}
	return xClientConn{cc}, nil
}

type xClientConn struct {
	*http2.ClientConn //nolint:staticcheck // SA1019: see the file comment
}

func (c xClientConn) StreamsActive() int { return c.State().StreamsActive }
