package headers

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// checkErr fails t unless err wraps want (nil meaning success) and, on
// failure, names the header.
func checkErr(t *testing.T, err, want error, header string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("got error %v; want nil", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("got error %v; want %v", err, want)
	}
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("got %T; want *Error", err)
	}
	if he.Header != header || !strings.Contains(err.Error(), header) {
		t.Fatalf("error %q does not name header %q", err, header)
	}
}

func TestParseUint64(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  uint64
		err   error
	}{
		{"zero", "0", 0, nil},
		{"valid", "1536", 1536, nil},
		{"leading zeros", "007", 7, nil},
		{"max", "18446744073709551615", math.MaxUint64, nil},
		{"surrounding space trimmed", " 5", 5, nil},
		{"surrounding tab trimmed", "5\t", 5, nil},
		{"empty", "", 0, ErrEmpty},
		{"blank", "  \t ", 0, ErrEmpty},
		{"negative", "-5", 0, ErrSyntax},
		{"plus sign", "+5", 0, ErrSyntax},
		{"inner space", "1 5", 0, ErrSyntax},
		{"overflow", "18446744073709551616", 0, ErrRange},
		{"long overflow", strings.Repeat("9", 40), 0, ErrRange},
		{"non-digit", "12a", 0, ErrSyntax},
		{"digits then junk past overflow", strings.Repeat("9", 30) + "x", 0, ErrSyntax},
		{"hex", "0x10", 0, ErrSyntax},
		{"underscore", "1_000", 0, ErrSyntax},
		{"decimal point", "1.0", 0, ErrSyntax},
		{"exponent", "1e3", 0, ErrSyntax},
		{"non-ASCII digit", "\u0661", 0, ErrSyntax},
		{"newline", "5\n", 0, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseUint64(InputTokens, tt.value)
			checkErr(t, err, tt.err, InputTokens)
			if got != tt.want {
				t.Fatalf("ParseUint64(%q) = %d; want %d", tt.value, got, tt.want)
			}
		})
	}
}

func TestParseUint32(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  uint32
		err   error
	}{
		{"zero is most urgent", "0", 0, nil},
		{"valid", "3", 3, nil},
		{"max", "4294967295", math.MaxUint32, nil},
		{"surrounding space trimmed", " 5", 5, nil},
		{"empty", "", 0, ErrEmpty},
		{"negative", "-1", 0, ErrSyntax},
		{"plus sign", "+5", 0, ErrSyntax},
		{"inner space", "4 2", 0, ErrSyntax},
		{"overflow", "4294967296", 0, ErrRange},
		{"u64 max overflows", "18446744073709551615", 0, ErrRange},
		{"non-digit", "high", 0, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseUint32(Priority, tt.value)
			checkErr(t, err, tt.err, Priority)
			if got != tt.want {
				t.Fatalf("ParseUint32(%q) = %d; want %d", tt.value, got, tt.want)
			}
		})
	}
}

func TestUintRoundTrip(t *testing.T) {
	t.Parallel()
	for _, v := range []uint64{0, 1, 9, 10, 99, 100, 4096, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64 - 1, math.MaxUint64} {
		s := FormatUint(v)
		got, err := ParseUint64(StargateExpectedQueueMs, s)
		if err != nil || got != v {
			t.Errorf("ParseUint64(FormatUint(%d)) = %d, %v; want %d, nil", v, got, err, v)
		}
		if v <= math.MaxUint32 {
			got32, err := ParseUint32(Priority, s)
			if err != nil || uint64(got32) != v {
				t.Errorf("ParseUint32(FormatUint(%d)) = %d, %v; want %d, nil", v, got32, err, v)
			}
		}
	}
}

func TestGetUint(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set(InputTokens, "42")
	h.Set(MaxWaitMs, "")
	h.Set(Priority, "7")
	h.Add(RequestSLOMs, "100")
	h.Add(RequestSLOMs, "200")

	tests := []struct {
		name        string
		header      string
		want        uint64
		wantPresent bool
		err         error
	}{
		{"present", InputTokens, 42, true, nil},
		{"canonical name works too", "X-Input-Tokens", 42, true, nil},
		{"absent is not an error", OutputTokens, 0, false, nil},
		{"present but blank is an error", MaxWaitMs, 0, true, ErrEmpty},
		{"first value wins", RequestSLOMs, 100, true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, present, err := GetUint64(h, tt.header)
			checkErr(t, err, tt.err, tt.header)
			if got != tt.want || present != tt.wantPresent {
				t.Fatalf("GetUint64(%q) = %d, %t; want %d, %t", tt.header, got, present, tt.want, tt.wantPresent)
			}
		})
	}

	t.Run("uint32", func(t *testing.T) {
		t.Parallel()
		if got, present, err := GetUint32(h, Priority); got != 7 || !present || err != nil {
			t.Fatalf("GetUint32(x-priority) = %d, %t, %v; want 7, true, nil", got, present, err)
		}
		if got, present, err := GetUint32(h, "x-absent"); got != 0 || present || err != nil {
			t.Fatalf("GetUint32(absent) = %d, %t, %v; want 0, false, nil", got, present, err)
		}
	})
}

func TestMillis(t *testing.T) {
	t.Parallel()
	const maxMs = math.MaxInt64 / 1_000_000 // the largest ms count a Duration holds
	durations := []struct {
		ms   uint64
		want time.Duration
	}{
		{0, 0},
		{250, 250 * time.Millisecond},
		{60000, time.Minute},
		{maxMs, maxMs * time.Millisecond},
		{maxMs + 1, math.MaxInt64},
		{math.MaxUint64, math.MaxInt64},
	}
	for _, tt := range durations {
		if got := MillisDuration(tt.ms); got != tt.want {
			t.Errorf("MillisDuration(%d) = %v; want %v", tt.ms, got, tt.want)
		}
	}

	formats := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0"},
		{0, "0"},
		{999 * time.Microsecond, "0"},
		{time.Millisecond, "1"},
		{1999 * time.Microsecond, "1"},
		{30 * time.Second, "30000"},
	}
	for _, tt := range formats {
		if got := FormatMillis(tt.d); got != tt.want {
			t.Errorf("FormatMillis(%v) = %q; want %q", tt.d, got, tt.want)
		}
	}

	for _, ms := range []uint64{0, 1, 25, 60000, 86_400_000} {
		got, err := ParseUint64(StargateMaxWaitMs, FormatMillis(MillisDuration(ms)))
		if err != nil || got != ms {
			t.Errorf("millis round trip of %d = %d, %v", ms, got, err)
		}
	}
}

func TestParseBool(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  bool
		err   error
	}{
		{"true", "true", true, nil},
		{"false", "false", false, nil},
		{"upper case", "TRUE", true, nil},
		{"mixed case", "False", false, nil},
		{"surrounding space trimmed", " true ", true, nil},
		{"empty", "", false, ErrEmpty},
		{"blank", "\t", false, ErrEmpty},
		{"one", "1", false, ErrSyntax},
		{"yes", "yes", false, ErrSyntax},
		{"inner space", "tr ue", false, ErrSyntax},
		{"trailing junk", "truex", false, ErrSyntax},
		{"Unicode fold is not ASCII fold", "fal\u017fe", false, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseBool(KVCacheHit, tt.value)
			checkErr(t, err, tt.err, KVCacheHit)
			if got != tt.want {
				t.Fatalf("ParseBool(%q) = %t; want %t", tt.value, got, tt.want)
			}
		})
	}

	for _, b := range []bool{true, false} {
		if got, err := ParseBool(KVCacheHit, FormatBool(b)); err != nil || got != b {
			t.Errorf("ParseBool(FormatBool(%t)) = %t, %v", b, got, err)
		}
	}

	h := http.Header{}
	h.Set(StargateRetryable, "TRUE")
	if got, present, err := GetBool(h, StargateRetryable); !got || !present || err != nil {
		t.Errorf("GetBool(x-stargate-retryable) = %t, %t, %v; want true, true, nil", got, present, err)
	}
	if got, present, err := GetBool(h, KVCacheHit); got || present || err != nil {
		t.Errorf("GetBool(absent) = %t, %t, %v; want false, false, nil", got, present, err)
	}
}

func TestParseText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		value  string
		want   string
		wantOK bool
	}{
		{"plain", "meta/llama-3", "meta/llama-3", true},
		{"trimmed", "  key \t", "key", true},
		{"inner space kept", "a b", "a b", true},
		{"empty is absent", "", "", false},
		{"blank is absent", " \t ", "", false},
		{"non-ASCII is absent", "caf\u00e9", "", false},
		{"control byte is absent", "a\x01b", "", false},
		{"DEL is absent", "a\x7fb", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseText(tt.value)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("ParseText(%q) = %q, %t; want %q, %t", tt.value, got, ok, tt.want, tt.wantOK)
			}
		})
	}

	h := http.Header{}
	h.Set(StargateLastClusterID, " cluster-a ")
	h.Set(CacheAffinityKey, "  ")
	if got, ok := GetText(h, StargateLastClusterID); got != "cluster-a" || !ok {
		t.Errorf("GetText(last cluster) = %q, %t; want %q, true", got, ok, "cluster-a")
	}
	if got, ok := GetText(h, CacheAffinityKey); got != "" || ok {
		t.Errorf("GetText(blank affinity key) = %q, %t; want absent", got, ok)
	}
	if got, ok := GetText(h, RoutingKey); got != "" || ok {
		t.Errorf("GetText(absent routing key) = %q, %t; want absent", got, ok)
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  string
		err   error
	}{
		{"uuid", "0b7f1c9e-5d0a-4c1e-9a53-0e1f2d3c4b5a", "0b7f1c9e-5d0a-4c1e-9a53-0e1f2d3c4b5a", nil},
		{"calibration id", "calibration-0b7f1c9e-g1-17", "calibration-0b7f1c9e-g1-17", nil},
		{"punctuation", "req:1/2?a=b&c~!", "req:1/2?a=b&c~!", nil},
		{"surrounding space trimmed", "  abc\t", "abc", nil},
		{"max length", strings.Repeat("a", MaxRequestIDLen), strings.Repeat("a", MaxRequestIDLen), nil},
		{"empty", "", "", ErrEmpty},
		{"blank", "   ", "", ErrEmpty},
		{"too long", strings.Repeat("a", MaxRequestIDLen+1), "", ErrTooLong},
		{"inner space", "a b", "", ErrInvalidChar},
		{"control", "a\x00b", "", ErrInvalidChar},
		{"newline", "a\nb", "", ErrInvalidChar},
		{"DEL", "a\x7f", "", ErrInvalidChar},
		{"non-ASCII", "r\u00e9q", "", ErrInvalidChar},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseRequestID(tt.value)
			checkErr(t, err, tt.err, RequestID)
			if got != tt.want {
				t.Fatalf("ParseRequestID(%q) = %q; want %q", tt.value, got, tt.want)
			}
		})
	}

	t.Run("validate does not trim", func(t *testing.T) {
		t.Parallel()
		checkErr(t, ValidateRequestID(" abc"), ErrInvalidChar, RequestID)
	})
}

func TestParseClusterID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		value string
		want  string
		err   error
	}{
		{"plain", "cluster-0001", "cluster-0001", nil},
		{"trimmed", " us-east-1 ", "us-east-1", nil},
		{"inner space kept", "rack a", "rack a", nil},
		{"max length", strings.Repeat("c", MaxClusterIDLen), strings.Repeat("c", MaxClusterIDLen), nil},
		{"empty", "", "", ErrEmpty},
		{"257 bytes are not stored", strings.Repeat("c", MaxClusterIDLen+1), "", ErrTooLong},
		{"control", "a\rb", "", ErrInvalidChar},
		{"inner tab", "a\tb", "", ErrInvalidChar},
		{"non-ASCII", "\u00e9", "", ErrInvalidChar},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseClusterID(tt.value)
			checkErr(t, err, tt.err, StargateClusterID)
			if got != tt.want {
				t.Fatalf("ParseClusterID(%q) = %q; want %q", tt.value, got, tt.want)
			}
		})
	}
}

func TestErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := ParseUint64(InputTokens, "+5")
	const want = "invalid x-input-tokens header: value is malformed (want a decimal integer from 0 to 18446744073709551615)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v; want %q", err, want)
	}
	_, err = ParseUint64(InputTokens, "secret-value")
	if strings.Contains(err.Error(), "secret-value") {
		t.Fatalf("error %q repeats the value", err)
	}
}

func TestParsersDoNotAllocateOnSuccess(t *testing.T) {
	h := http.Header{}
	h.Set(InputTokens, "1536")
	h.Set(KVCacheHit, "true")
	h.Set(Model, "meta/llama")
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = ParseUint64(InputTokens, "1536")
		_, _ = ParseUint32(Priority, " 3 ")
		_, _ = ParseBool(KVCacheHit, "false")
		_, _ = ParseRequestID("req-1")
		_, _ = ParseClusterID("cluster-a")
		_, _, _ = GetUint64(h, InputTokens)
		_, _, _ = GetBool(h, KVCacheHit)
		_, _ = GetText(h, Model)
		_ = IsKnown("X-Stargate-Cluster-Id")
	})
	if allocs != 0 {
		t.Fatalf("got %v allocations per run; want 0", allocs)
	}
}

func TestIsStreamingContentType(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "text/event-stream; charset=utf-8": true, "Text/Event-Stream": true,
		"application/x-ndjson": true, "application/json": false, "": false, "text/plain": false,
	} {
		if got := IsStreamingContentType(ct); got != want {
			t.Errorf("IsStreamingContentType(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestGetDeadline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		values  []string
		want    time.Duration
		present bool
		err     error
	}{
		{"absent", nil, 0, false, nil},
		{"zero: the deadline has passed", []string{"0"}, 0, true, nil},
		{"some ms", []string{"1500"}, 1500 * time.Millisecond, true, nil},
		{"surrounding space trimmed", []string{" 20 "}, 20 * time.Millisecond, true, nil},
		{"first value wins", []string{"7", "9"}, 7 * time.Millisecond, true, nil},
		{"the bound", []string{"86400000"}, MaxDeadline, true, nil},
		{"above the bound", []string{"86400001"}, 0, true, ErrRange},
		{"far above the bound", []string{"18446744073709551615"}, 0, true, ErrRange},
		{"blank", []string{" "}, 0, true, ErrEmpty},
		{"negative", []string{"-1"}, 0, true, ErrSyntax},
		{"decimal", []string{"1.5"}, 0, true, ErrSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tt.values {
				h.Add(StargateDeadlineMs, v)
			}
			got, present, err := GetDeadline(h)
			if got != tt.want || present != tt.present || !errors.Is(err, tt.err) {
				t.Fatalf("GetDeadline(%q) = %v, %v, %v; want %v, %v, %v", tt.values, got, present, err, tt.want, tt.present, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), StargateDeadlineMs) {
				t.Errorf("error %q does not name the header", err)
			}
		})
	}
}

func TestDeadlineMillis(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		left time.Duration
		want uint64
	}{
		{-time.Second, 0},
		{0, 0},
		{time.Nanosecond, 1},
		{999 * time.Microsecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + time.Nanosecond, 2},
		{1999*time.Millisecond + 300*time.Microsecond, 2000},
		{MaxDeadline, uint64(MaxDeadline / time.Millisecond)},
	} {
		if got := DeadlineMillis(tc.left); got != tc.want {
			t.Errorf("DeadlineMillis(%v) = %d; want %d", tc.left, got, tc.want)
		}
	}
}
