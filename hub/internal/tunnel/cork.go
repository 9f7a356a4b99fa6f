package tunnel

import (
	"encoding/binary"
	"net"
	"sync"
)

// corkConn is a plaintext tunnel connection that holds back the writes the
// pylon has no use for on their own, and sends them in one system call
// with the next write.
//
// x/net's client flushes after every group of frames: a request's HEADERS
// go out alone and its DATA follows a few microseconds later in a second
// write, and the connection-level WINDOW_UPDATE it sends after every 4 KiB
// of answers read is a third. A HEADERS frame that does not end its stream
// is useless to the pylon until the body arrives (the pylon reads the body
// whole before acting on the request), and the connection-level window is
// 1 GiB, so returning it a request later can never stall the pylon. Both
// are held and leave with whatever the connection writes next: in practice
// the request's DATA, which x/net writes straight after, so a request costs
// one write instead of two or three. Nothing else is held: a stream's own
// WINDOW_UPDATE, DATA, RST_STREAM, PING, SETTINGS and a HEADERS frame that
// ends its stream (a request without a body: the registration stream, a
// /health probe) go out at once, with anything held in front of them, in
// order. There is no timer: a held write waits only for the next write.
//
// TLS connections are not corked: tls.Conn seals each Write as its own
// record, so joining two writes there would need a copy.
type corkConn struct {
	net.Conn

	mu   sync.Mutex
	held []byte
}

func newCorkConn(c net.Conn) *corkConn { return &corkConn{Conn: c} }

// maxHeld bounds what is held: a header block larger than this (a request
// with huge headers) goes out at once.
const maxHeld = 16 << 10

// Write holds p when it may wait (holdable), else writes what is held and
// p together. A held p is reported written: an error in sending it is
// returned by the write that carries it, which x/net treats as the
// connection's failure, as it would have treated the first.
func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.held)+len(p) <= maxHeld && holdable(p) {
		c.held = append(c.held, p...)
		return len(p), nil
	}
	if len(c.held) == 0 {
		return c.Conn.Write(p)
	}
	// One writev for the held frames and p on a TCP connection.
	bufs := net.Buffers{c.held, p}
	n, err := bufs.WriteTo(c.Conn)
	held := int64(len(c.held))
	c.held = c.held[:0]
	return int(max(n-held, 0)), err
}

// HTTP/2 frame layout (RFC 9113, section 4.1): a 9-byte header of 24-bit
// length, type, flags and 31-bit stream id, then the payload.
const (
	frameHeaderLen    = 9
	frameHeaders      = 0x1
	frameWindowUpdate = 0x8
	frameContinuation = 0x9
	flagEndStream     = 0x1
)

// holdable reports whether p is whole frames that the pylon needs no
// sooner than the next write: HEADERS frames that leave their stream open
// (with their CONTINUATIONs) and connection-level WINDOW_UPDATEs. Anything
// else, or a write that splits a frame, is not.
func holdable(p []byte) bool {
	if len(p) == 0 {
		return false
	}
	openHeaders := false // a CONTINUATION is holdable only after its held HEADERS
	for len(p) > 0 {
		if len(p) < frameHeaderLen {
			return false
		}
		n := int(p[0])<<16 | int(p[1])<<8 | int(p[2])
		typ, flags := p[3], p[4]
		stream := binary.BigEndian.Uint32(p[5:9]) &^ (1 << 31)
		if len(p) < frameHeaderLen+n {
			return false
		}
		switch {
		case typ == frameHeaders && stream != 0 && flags&flagEndStream == 0:
			openHeaders = true
		case typ == frameContinuation && openHeaders:
		case typ == frameWindowUpdate && stream == 0:
		default:
			return false
		}
		p = p[frameHeaderLen+n:]
	}
	return true
}
