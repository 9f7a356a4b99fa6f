package server

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
)

// plainSeconds is the syntax parseSeconds accepts, restated as a rule:
// digits, optionally a dot and more digits, at most 32 bytes.
var plainSeconds = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// FuzzParseSeconds: X-Stainless-Timeout comes from any client. parseSeconds
// accepts exactly the plain decimals of at most 32 bytes that are within
// headers.MaxDeadline, and then agrees with strconv.ParseFloat.
func FuzzParseSeconds(f *testing.F) {
	for _, s := range []string{"2", "600", "600.0", "2.5", "0", "", ".5", "5.", "-1", "+1", "1e3", "inf", "NaN",
		"86400", "86400.001", "99999999999999999999", " 2", "0x10", "1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := parseSeconds(s)
		want := len(s) <= 32 && plainSeconds.MatchString(s)
		var v float64
		if want {
			var err error
			v, err = strconv.ParseFloat(s, 64)
			want = err == nil && v <= headers.MaxDeadline.Seconds()
		}
		if ok != want {
			t.Fatalf("parseSeconds(%q) ok = %v, want %v", s, ok, want)
		}
		if ok && d != time.Duration(v*float64(time.Second)) {
			t.Fatalf("parseSeconds(%q) = %v, want %v s", s, d, v)
		}
		if d < 0 || d > headers.MaxDeadline {
			t.Fatalf("parseSeconds(%q) = %v, outside [0, %v]", s, d, headers.MaxDeadline)
		}
	})
}
