package tunnel

import (
	"bytes"
	"net"
	"testing"

	"golang.org/x/net/http2"
)

// writeLog is a net.Conn that records every Write it receives.
type writeLog struct {
	net.Conn
	writes [][]byte
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, bytes.Clone(p))
	return len(p), nil
}

func (w *writeLog) sent() []byte { return bytes.Join(w.writes, nil) }

// frames encodes the frames write produces, as x/net's client would hand
// them to the connection in one flush.
func frames(t *testing.T, write func(fr *http2.Framer) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := write(http2.NewFramer(&buf, nil)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func headersFrame(t *testing.T, stream uint32, endStream bool) []byte {
	return frames(t, func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: []byte{0x83, 0x86}, EndStream: endStream, EndHeaders: true})
	})
}

func dataFrame(t *testing.T, stream uint32) []byte {
	return frames(t, func(fr *http2.Framer) error { return fr.WriteData(stream, true, []byte(`{"model":"m"}`)) })
}

func windowUpdate(t *testing.T, stream uint32) []byte {
	return frames(t, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(stream, 4096) })
}

func mustWrite(t *testing.T, c net.Conn, p []byte) {
	t.Helper()
	if n, err := c.Write(p); err != nil || n != len(p) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(p))
	}
}

// A request's HEADERS wait for its DATA, and both reach the connection in
// order: the pylon gets them in one write instead of two.
func TestCorkHoldsOpenHeadersUntilTheBody(t *testing.T) {
	under := &writeLog{}
	c := newCorkConn(under)
	h, d := headersFrame(t, 1, false), dataFrame(t, 1)
	mustWrite(t, c, h)
	if len(under.writes) != 0 {
		t.Fatalf("HEADERS of an open stream written at once: %d writes", len(under.writes))
	}
	mustWrite(t, c, d)
	if got, want := under.sent(), append(bytes.Clone(h), d...); !bytes.Equal(got, want) {
		t.Fatalf("sent %x, want HEADERS then DATA %x", got, want)
	}
}

// Everything the pylon must see at once goes out at once: a request
// without a body (HEADERS with END_STREAM, every GET), a stream's own
// window, a frame split over two writes, a header block over the bound.
func TestCorkWritesAtOnceWhatThePylonWaitsFor(t *testing.T) {
	big := frames(t, func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: make([]byte, maxHeld), EndHeaders: true})
	})
	for name, p := range map[string][]byte{
		"headers ending the stream": headersFrame(t, 1, true),
		"stream window update":      windowUpdate(t, 5),
		"data":                      dataFrame(t, 1),
		"split frame":               headersFrame(t, 1, false)[:frameHeaderLen+1],
		"header block over maxHeld": big,
		"client preface":            []byte(http2.ClientPreface),
	} {
		t.Run(name, func(t *testing.T) {
			under := &writeLog{}
			mustWrite(t, newCorkConn(under), p)
			if !bytes.Equal(under.sent(), p) {
				t.Fatalf("held %x; want it written at once", p)
			}
		})
	}
}

// The connection-level window (1 GiB) is returned with the next write,
// before it and in order.
func TestCorkHoldsConnectionWindowUntilTheNextWrite(t *testing.T) {
	under := &writeLog{}
	c := newCorkConn(under)
	conn, h, stream := windowUpdate(t, 0), headersFrame(t, 7, false), windowUpdate(t, 7)
	mustWrite(t, c, conn)
	mustWrite(t, c, h)
	if len(under.writes) != 0 {
		t.Fatalf("connection window and open HEADERS written at once: %d writes", len(under.writes))
	}
	mustWrite(t, c, stream)
	want := bytes.Join([][]byte{conn, h, stream}, nil)
	if got := under.sent(); !bytes.Equal(got, want) {
		t.Fatalf("sent %x, want %x", got, want)
	}
	mustWrite(t, c, dataFrame(t, 7))
	if got := under.sent(); !bytes.Equal(got[len(want):], dataFrame(t, 7)) {
		t.Fatalf("a write after the flush carried held bytes again: %x", got[len(want):])
	}
}

// On a TCP connection the held frames and the next write leave in one
// writev: the pylon reads exactly the bytes in order.
func TestCorkOverTCPDeliversInOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	peer := recv(t, accepted, "accept")
	if peer == nil {
		t.Fatal("accept failed")
	}
	defer func() { _ = peer.Close() }()
	c := newCorkConn(raw)
	h, d := headersFrame(t, 1, false), dataFrame(t, 1)
	mustWrite(t, c, h)
	mustWrite(t, c, d)
	fr := http2.NewFramer(nil, peer)
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.(*http2.HeadersFrame); !ok {
		t.Fatalf("first frame %v, want the HEADERS", f)
	}
	f, err = fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	if df, ok := f.(*http2.DataFrame); !ok || string(df.Data()) != `{"model":"m"}` {
		t.Fatalf("second frame %v, want the DATA", f)
	}
}
