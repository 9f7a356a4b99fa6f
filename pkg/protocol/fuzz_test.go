package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzReadFrame feeds arbitrary bytes to ReadFrame. It must never panic,
// never consume more than one frame, never ask its reader to fill a buffer
// larger than MaxFrameBytes (the body buffer is the only allocation sized by
// the peer), and refuse a declared length over MaxFrameBytes after reading
// only the 4-byte length.
func FuzzReadFrame(f *testing.F) {
	seed := func(body string) []byte {
		b := make([]byte, 4+len(body))
		binary.BigEndian.PutUint32(b, uint32(len(body)))
		copy(b[4:], body)
		return b
	}
	f.Add(seed(`{"v":1,"inference_server_id":"p","heartbeat_ms":1000}`))
	f.Add(seed(`{"v":1,"inference_server_id":"p"}`))
	f.Add(seed(``))
	f.Add(seed(`null`))
	f.Add(seed(`{"v":1e400}`))
	f.Add(seed(`{"v":1,"inference_server_id":"\ud800"}`))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{', '}'})
	f.Add([]byte{0, 1, 0, 0})
	f.Add([]byte{0, 1, 0, 1})
	f.Add([]byte{0, 0})
	f.Add(append(seed(`{}`), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &recordingReader{r: bytes.NewReader(data)}
		var hs Handshake
		err := ReadFrame(r, &hs)
		if r.maxBuf > MaxFrameBytes {
			t.Fatalf("ReadFrame asked for a %d-byte buffer; the limit is %d", r.maxBuf, MaxFrameBytes)
		}
		if len(data) < 4 {
			if err == nil {
				t.Fatalf("ReadFrame accepted %d bytes, shorter than a frame length", len(data))
			}
			return
		}
		n := binary.BigEndian.Uint32(data)
		if n > MaxFrameBytes {
			if !errors.Is(err, ErrFrameTooLarge) {
				t.Fatalf("declared length %d: error = %v; want ErrFrameTooLarge", n, err)
			}
			if r.n != 4 {
				t.Fatalf("declared length %d: consumed %d bytes; want 4", n, r.n)
			}
			return
		}
		if r.n > 4+int(n) {
			t.Fatalf("ReadFrame consumed %d bytes of a %d-byte frame", r.n, 4+n)
		}
		if err == nil {
			// Whatever decoded must encode again within the limit it came in.
			var buf bytes.Buffer
			if werr := WriteFrame(&buf, hs); werr != nil && !errors.Is(werr, ErrFrameTooLarge) {
				t.Fatalf("re-encoding a decoded handshake: %v", werr)
			}
		}
	})
}

// FuzzFrameRoundTrip checks that every Handshake WriteFrame accepts comes
// back equal from ReadFrame, with nothing left over.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add(1, "pylon-a", "cluster-1", "http://engine:8000", "tok", uint64(1000))
	f.Add(0, "", "", "", "", uint64(0))
	f.Add(-7, "a\"b\\c\n", "\u2028", "http://[::1]:80", "\x00", ^uint64(0))
	f.Fuzz(func(t *testing.T, v int, id, cluster, url, token string, hb uint64) {
		in := Handshake{V: v, InferenceServerID: id, ClusterID: cluster, InferenceServerURL: url, AuthToken: token, HeartbeatMs: hb}
		var buf bytes.Buffer
		if err := WriteFrame(&buf, in); err != nil {
			if errors.Is(err, ErrFrameTooLarge) {
				return
			}
			t.Fatalf("WriteFrame(%+v): %v", in, err)
		}
		var out Handshake
		if err := ReadFrame(&buf, &out); err != nil {
			t.Fatalf("ReadFrame of WriteFrame(%+v): %v", in, err)
		}
		if buf.Len() != 0 {
			t.Fatalf("%d bytes left after one frame", buf.Len())
		}
		// encoding/json replaces invalid UTF-8 with U+FFFD, so only valid
		// strings are expected back byte for byte.
		for _, s := range []string{id, cluster, url, token} {
			if !utf8.ValidString(s) {
				return
			}
		}
		if out != in {
			t.Fatalf("round trip: got %+v; want %+v", out, in)
		}
	})
}
