package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame feeds arbitrary bytes to ReadFrame through a reader that
// hands them out a fuzzed number at a time. ReadFrame must never panic,
// never ask its reader to fill a buffer larger than MaxFrameBytes (the body
// buffer is the only allocation sized by the peer), refuse a declared
// length over MaxFrameBytes after reading only the 4-byte length, and
// otherwise agree with encoding/json on the frame's body: an error exactly
// when the body is short or not a Handshake, else the decoded value, having
// consumed exactly the frame (the HTTP/2 preface follows on the same
// connection) in a bounded number of reads.
func FuzzReadFrame(f *testing.F) {
	seed := func(body string) []byte {
		b := make([]byte, 4+len(body))
		binary.BigEndian.PutUint32(b, uint32(len(body)))
		copy(b[4:], body)
		return b
	}
	for _, b := range [][]byte{
		seed(`{"v":1,"inference_server_id":"p","heartbeat_ms":1000}`),
		seed(`{"v":1,"inference_server_id":"p"}`),
		seed(``), seed(`null`), seed(`{"v":1e400}`), seed(`{"v":1,"inference_server_id":"\ud800"}`),
		seed(`{"V":2,"Inference_Server_ID":"x","auth_token":"t","heartbeat_ms":-1}`),
		{0xff, 0xff, 0xff, 0xff, '{', '}'}, {0, 1, 0, 0}, {0, 1, 0, 1}, {0, 0},
		append(seed(`{}`), "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"...),
		seed(`{"v":1}`)[:9],
	} {
		f.Add(b, uint8(1))
		f.Add(b, uint8(7))
	}
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		step := max(int(chunk), 1)
		r := &recordingReader{r: &pieceReader{data: data, n: step}}
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
		n := int(binary.BigEndian.Uint32(data))
		if n > MaxFrameBytes {
			if !errors.Is(err, ErrFrameTooLarge) || r.n != 4 {
				t.Fatalf("declared length %d: error %v after %d bytes; want ErrFrameTooLarge after 4", n, err, r.n)
			}
			return
		}
		if len(data) < 4+n {
			if err == nil {
				t.Fatalf("accepted a %d-byte body of a %d-byte frame", len(data)-4, n)
			}
			return
		}
		var want Handshake
		werr := json.Unmarshal(data[4:4+n], &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("body %q: ReadFrame error %v; encoding/json error %v", data[4:4+n], err, werr)
		}
		if err != nil {
			return
		}
		if hs != want || r.n != 4+n {
			t.Fatalf("body %q: read %+v consuming %d bytes; want %+v consuming %d", data[4:4+n], hs, r.n, want, 4+n)
		}
		if maxReads := (4+n)/step + 3; r.reads > maxReads {
			t.Fatalf("%d reads for a %d-byte frame in pieces of %d", r.reads, 4+n, step)
		}
	})
}

// FuzzFrameRoundTrip checks WriteFrame's bytes against the framing rule
// (a 4-byte big-endian length, then the JSON encoding/json writes) and
// that ReadFrame gives back what encoding/json decodes from it, with
// nothing left over; invalid UTF-8 comes back as encoding/json repairs it.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add(1, "pylon-a", "cluster-1", "http://engine:8000", "tok", uint64(1000))
	f.Add(0, "", "", "", "", uint64(0))
	f.Add(-7, "a\"b\\c\n", "\u2028", "http://[::1]:80", "\x00", ^uint64(0))
	f.Add(1, "\xff\xfe", "<&>", "", "", uint64(1))
	f.Fuzz(func(t *testing.T, v int, id, cluster, url, token string, hb uint64) {
		in := Handshake{V: v, InferenceServerID: id, ClusterID: cluster, InferenceServerURL: url, AuthToken: token, HeartbeatMs: hb}
		body, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		err = WriteFrame(&buf, in)
		if len(body) > MaxFrameBytes {
			if !errors.Is(err, ErrFrameTooLarge) || buf.Len() != 0 {
				t.Fatalf("a %d-byte body: error %v, %d bytes written; want ErrFrameTooLarge and nothing", len(body), err, buf.Len())
			}
			return
		}
		if err != nil {
			t.Fatalf("WriteFrame(%+v): %v", in, err)
		}
		wire := buf.Bytes()
		if len(wire) != 4+len(body) || binary.BigEndian.Uint32(wire) != uint32(len(body)) || !bytes.Equal(wire[4:], body) {
			t.Fatalf("frame %q; want the length %d then %q", wire, len(body), body)
		}
		var want Handshake
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		var out Handshake
		if err := ReadFrame(&buf, &out); err != nil {
			t.Fatalf("ReadFrame of WriteFrame(%+v): %v", in, err)
		}
		if buf.Len() != 0 {
			t.Fatalf("%d bytes left after one frame", buf.Len())
		}
		if out != want {
			t.Fatalf("round trip: got %+v; want %+v", out, want)
		}
	})
}

// pieceReader hands out data at most n bytes per Read, as a TCP connection
// may, and reports EOF once it is empty.
type pieceReader struct {
	data []byte
	n    int
}

func (p *pieceReader) Read(b []byte) (int, error) {
	if len(p.data) == 0 {
		return 0, io.EOF
	}
	k := copy(b[:min(len(b), p.n)], p.data)
	p.data = p.data[k:]
	return k, nil
}
