package headers

import (
	"bufio"
	"bytes"
	"errors"
	"math"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseUint64 checks ParseUint64 against strconv.ParseUint, which
// accepts exactly plain decimal digits in base 10, on the value without
// surrounding spaces and tabs (trimmed here, not by the code under test);
// that ParseUint32 agrees wherever the value fits; and that an accepted
// value survives FormatUint.
func FuzzParseUint64(f *testing.F) {
	for _, s := range []string{"0", "1536", "007", " 5", "5\t", "+5", "-5", "1 5", "", " ",
		"18446744073709551615", "18446744073709551616", "4294967296", "0x10", "1_0", "\u0661"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseUint64(InputTokens, s)
		want, oracleErr := strconv.ParseUint(strings.Trim(s, " \t"), 10, 64)
		if (err == nil) != (oracleErr == nil) {
			t.Fatalf("ParseUint64(%q) error = %v; strconv error = %v", s, err, oracleErr)
		}
		if err != nil {
			var he *Error
			if !errors.As(err, &he) || he.Header != InputTokens {
				t.Fatalf("ParseUint64(%q) error %v does not name the header", s, err)
			}
			if !errors.Is(err, ErrEmpty) && !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrRange) {
				t.Fatalf("ParseUint64(%q) error %v wraps no sentinel", s, err)
			}
			if v != 0 {
				t.Fatalf("ParseUint64(%q) = %d with an error; want 0", s, v)
			}
			return
		}
		if v != want {
			t.Fatalf("ParseUint64(%q) = %d; strconv says %d", s, v, want)
		}
		if back, err := ParseUint64(InputTokens, FormatUint(v)); err != nil || back != v {
			t.Fatalf("ParseUint64(FormatUint(%d)) = %d, %v", v, back, err)
		}
		v32, err32 := ParseUint32(Priority, s)
		switch {
		case v <= math.MaxUint32 && (err32 != nil || uint64(v32) != v):
			t.Fatalf("ParseUint32(%q) = %d, %v; want %d", s, v32, err32, v)
		case v > math.MaxUint32 && !errors.Is(err32, ErrRange):
			t.Fatalf("ParseUint32(%q) error = %v; want ErrRange", s, err32)
		}
	})
}

// FuzzFormatUint checks that FormatUint writes plain decimal digits with no
// leading zero that strconv reads back as x, and parse(format(x)) == x,
// over the whole u64 range.
func FuzzFormatUint(f *testing.F) {
	for _, v := range []uint64{0, 1, 10, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v uint64) {
		s := FormatUint(v)
		if s == "" || (len(s) > 1 && s[0] == '0') || strings.Trim(s, "0123456789") != "" {
			t.Fatalf("FormatUint(%d) = %q; want plain decimal digits", v, s)
		}
		if back, err := strconv.ParseUint(s, 10, 64); err != nil || back != v {
			t.Fatalf("FormatUint(%d) = %q, which strconv reads as %d, %v", v, s, back, err)
		}
		got, err := ParseUint64(StargateExpectedQueueMs, s)
		if err != nil || got != v {
			t.Fatalf("ParseUint64(FormatUint(%d)) = %d, %v", v, got, err)
		}
	})
}

// FuzzRequestID checks ValidateRequestID against a direct statement of the
// rule, that ParseRequestID accepts exactly the trimmed valid ids and is
// idempotent, and that an accepted id crosses an HTTP/1 header block
// unchanged.
func FuzzRequestID(f *testing.F) {
	for _, s := range []string{"req-1", "0b7f1c9e-5d0a-4c1e-9a53-0e1f2d3c4b5a", " abc ", "a b", "", "\x00",
		"r\u00e9q", "calibration-x-g1-1", "a\r\nX-Stargate-Cluster-Id: evil"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		verr := ValidateRequestID(s)
		if valid := isRequestID(s); valid != (verr == nil) {
			t.Fatalf("ValidateRequestID(%q) = %v; rule says valid=%t", s, verr, valid)
		}
		id, perr := ParseRequestID(s)
		if valid := isRequestID(strings.Trim(s, " \t")); valid != (perr == nil) {
			t.Fatalf("ParseRequestID(%q) = %v; rule says valid=%t", s, perr, valid)
		}
		if perr != nil {
			if id != "" {
				t.Fatalf("ParseRequestID(%q) = %q with an error", s, id)
			}
			return
		}
		if verr == nil && id != s {
			t.Fatalf("ParseRequestID(%q) = %q; a valid id must come back unchanged", s, id)
		}
		if again, err := ParseRequestID(id); err != nil || again != id {
			t.Fatalf("ParseRequestID is not idempotent on %q: %q, %v", id, again, err)
		}
		var buf bytes.Buffer
		if err := (http.Header{http.CanonicalHeaderKey(RequestID): {id}}).Write(&buf); err != nil {
			t.Fatal(err)
		}
		buf.WriteString("\r\n")
		got, err := textproto.NewReader(bufio.NewReader(&buf)).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("reading back %q: %v", id, err)
		}
		if len(got) != 1 || got.Get(RequestID) != id {
			t.Fatalf("id %q became header block %v", id, got)
		}
	})
}

// isRequestID states the x-request-id rule independently of the code under
// test.
func isRequestID(s string) bool {
	if len(s) == 0 || len(s) > MaxRequestIDLen {
		return false
	}
	for _, b := range []byte(s) {
		if b <= ' ' || b >= 0x7f {
			return false
		}
	}
	return true
}
