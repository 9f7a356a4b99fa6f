package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFrameRoundTripLeavesFollowingBytesUnread(t *testing.T) {
	in := Handshake{
		V:                  Version,
		InferenceServerID:  "pylon-a",
		ClusterID:          "cluster-1",
		InferenceServerURL: "http://engine:8000",
		AuthToken:          "s3cret",
		HeartbeatMs:        100,
	}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, in); err != nil {
		t.Fatalf("WriteFrame: %v", err)
	}
	// The HTTP/2 client preface follows the frame on a real connection; it
	// must still be there after ReadFrame.
	const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	buf.WriteString(preface)
	var out Handshake
	if err := ReadFrame(&buf, &out); err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if out != in {
		t.Fatalf("round trip: got %+v; want %+v", out, in)
	}
	if got := buf.String(); got != preface {
		t.Fatalf("bytes left after the frame = %q; want %q", got, preface)
	}
}

func TestFrameAckRoundTrip(t *testing.T) {
	in := HandshakeAck{V: Version, Code: CodeDuplicate, Reason: "already connected", HubID: "hub-0"}
	var buf bytes.Buffer
	if err := WriteFrame(&buf, in); err != nil {
		t.Fatalf("WriteFrame: %v", err)
	}
	var out HandshakeAck
	if err := ReadFrame(&buf, &out); err != nil {
		t.Fatalf("ReadFrame: %v", err)
	}
	if out != in {
		t.Fatalf("got %+v; want %+v", out, in)
	}
}

func TestWriteFrameRejectsOversizedFrame(t *testing.T) {
	var buf bytes.Buffer
	err := WriteFrame(&buf, Handshake{InferenceServerID: strings.Repeat("x", MaxFrameBytes)})
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("WriteFrame of a %d-byte id: error = %v; want ErrFrameTooLarge", MaxFrameBytes, err)
	}
	if buf.Len() != 0 {
		t.Fatalf("WriteFrame wrote %d bytes of a refused frame", buf.Len())
	}
}

func TestReadFrameRejectsOversizedLengthWithoutReadingBody(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], MaxFrameBytes+1)
	r := &recordingReader{r: io.MultiReader(bytes.NewReader(hdr[:]), strings.NewReader("{}"))}
	var hs Handshake
	if err := ReadFrame(r, &hs); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("error = %v; want ErrFrameTooLarge", err)
	}
	if r.n != 4 {
		t.Fatalf("ReadFrame consumed %d bytes of an oversized frame; want only the 4-byte length", r.n)
	}
}

func TestReadFrameOversizedLengthAllocatesNothing(t *testing.T) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], 0xFFFFFFFF)
	var hs Handshake
	r := bytes.NewReader(hdr[:])
	allocs := testing.AllocsPerRun(100, func() {
		r.Reset(hdr[:])
		_ = ReadFrame(r, &hs)
	})
	// ErrFrameTooLarge is a preallocated sentinel; the 4-byte header lives
	// on the stack. The only allowance is io.ReadFull's interface boxing.
	if allocs > 1 {
		t.Fatalf("ReadFrame of a 4 GiB length allocated %v times per call; want at most 1", allocs)
	}
}

func TestReadFrameErrors(t *testing.T) {
	frame := func(body string) []byte {
		b := make([]byte, 4+len(body))
		binary.BigEndian.PutUint32(b, uint32(len(body)))
		copy(b[4:], body)
		return b
	}
	for _, tc := range []struct {
		name     string
		in       []byte
		wantEOF  bool
		wantJSON bool
	}{
		{name: "empty", in: nil, wantEOF: true},
		{name: "short header", in: []byte{0, 0}, wantEOF: true},
		{name: "short body", in: frame(`{"v":1}`)[:6], wantEOF: true},
		{name: "not json", in: frame(`hello`), wantJSON: true},
		{name: "wrong type", in: frame(`{"v":"one"}`), wantJSON: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hs Handshake
			err := ReadFrame(bytes.NewReader(tc.in), &hs)
			if err == nil {
				t.Fatal("ReadFrame succeeded; want an error")
			}
			if isEOF := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF); isEOF != tc.wantEOF {
				t.Fatalf("error %v: wraps EOF = %v; want %v", err, isEOF, tc.wantEOF)
			}
			var se *json.SyntaxError
			var te *json.UnmarshalTypeError
			if isJSON := errors.As(err, &se) || errors.As(err, &te); isJSON != tc.wantJSON {
				t.Fatalf("error %v: wraps a JSON error = %v; want %v", err, isJSON, tc.wantJSON)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	long := strings.Repeat("a", 257)
	for _, tc := range []struct {
		name string
		hs   Handshake
		want string
	}{
		{name: "ok", hs: Handshake{V: Version, InferenceServerID: "p"}, want: CodeOK},
		{name: "ok with cluster", hs: Handshake{V: Version, InferenceServerID: "p", ClusterID: "c"}, want: CodeOK},
		{name: "256-byte id", hs: Handshake{V: Version, InferenceServerID: long[:256]}, want: CodeOK},
		{name: "64-byte region", hs: Handshake{V: Version, InferenceServerID: "p", Region: long[:64]}, want: CodeOK},
		{name: "65-byte region", hs: Handshake{V: Version, InferenceServerID: "p", Region: long[:65]}, want: CodeInvalid},
		{name: "old version", hs: Handshake{V: 0, InferenceServerID: "p"}, want: CodeVersion},
		{name: "new version", hs: Handshake{V: Version + 1, InferenceServerID: "p"}, want: CodeVersion},
		{name: "no id", hs: Handshake{V: Version}, want: CodeInvalid},
		{name: "long id", hs: Handshake{V: Version, InferenceServerID: long}, want: CodeInvalid},
		{name: "long cluster", hs: Handshake{V: Version, InferenceServerID: "p", ClusterID: long}, want: CodeInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, err := tc.hs.Validate()
			if code != tc.want {
				t.Fatalf("Validate() code = %q (%v); want %q", code, err, tc.want)
			}
			if (err == nil) != (tc.want == CodeOK) {
				t.Fatalf("Validate() error = %v with code %q", err, code)
			}
		})
	}
}

func TestEffectiveClusterID(t *testing.T) {
	if got := (&Handshake{InferenceServerID: "p"}).EffectiveClusterID(); got != "p" {
		t.Fatalf("empty cluster: got %q; want the inference server id", got)
	}
	if got := (&Handshake{InferenceServerID: "p", ClusterID: "c"}).EffectiveClusterID(); got != "c" {
		t.Fatalf("got %q; want %q", got, "c")
	}
}

func TestRegistrationJSONShape(t *testing.T) {
	reg := Registration{
		V: Version, Seq: 7, SentAtUnixMs: 1700000000000, InferenceServerID: "p", ClusterID: "c",
		Models: map[string]ModelEntry{
			"m": {Status: StatusActive, Stats: &ModelStats{QueueSize: 3, QueueTimeEstimateMsByPriority: map[uint32]uint64{0: 12}}},
			"n": {Status: StatusInactive},
		},
	}
	b, err := json.Marshal(reg)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.ContainsRune(b, '\n') {
		t.Fatalf("a registration encodes with a newline, which would split an NDJSON line: %s", b)
	}
	var back Registration
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Seq != 7 || back.Models["m"].Stats.QueueTimeEstimateMsByPriority[0] != 12 || back.Models["n"].Stats != nil {
		t.Fatalf("round trip lost data: %s -> %+v", b, back)
	}
}

// recordingReader counts the reads and the bytes it returns and records
// the largest buffer it was asked to fill, which is the size of
// ReadFrame's body allocation.
type recordingReader struct {
	r      io.Reader
	n      int
	maxBuf int
	reads  int
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.reads++
	r.maxBuf = max(r.maxBuf, len(p))
	n, err := r.r.Read(p)
	r.n += n
	return n, err
}
