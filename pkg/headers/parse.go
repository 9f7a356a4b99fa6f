package headers

import (
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sentinel errors wrapped by *Error. Callers branch on them with errors.Is,
// for example to tell a blank numeric header (a 400 at the hub) from an
// absent one, which the Get helpers report as present == false.
var (
	// ErrEmpty means the value is blank after trimming spaces and tabs.
	ErrEmpty = errors.New("value is empty")
	// ErrSyntax means the value is not of the header's form: a sign, an
	// inner space or a non-digit in a number, or a word other than true or
	// false in a boolean.
	ErrSyntax = errors.New("value is malformed")
	// ErrRange means a number does not fit the header's type.
	ErrRange = errors.New("value is out of range")
	// ErrTooLong means an identifier exceeds its length cap.
	ErrTooLong = errors.New("value is too long")
	// ErrInvalidChar means an identifier holds a byte its header does not
	// allow.
	ErrInvalidChar = errors.New("value has an invalid character")
)

// Error reports a malformed header value. It names the header and the
// expected form but never repeats the value, which comes from the network
// and may be large or hostile.
type Error struct {
	// Header is the header name as the caller passed it.
	Header string
	// Want describes the accepted form, for the error message.
	Want string
	// Err is one of the package's sentinel errors.
	Err error
}

// Error returns a sentence naming the header, the problem and the expected
// form.
func (e *Error) Error() string {
	return "invalid " + e.Header + " header: " + e.Err.Error() + " (want " + e.Want + ")"
}

// Unwrap returns the sentinel error so errors.Is works.
func (e *Error) Unwrap() error { return e.Err }

const (
	wantUint64    = "a decimal integer from 0 to 18446744073709551615"
	wantUint32    = "a decimal integer from 0 to 4294967295"
	wantBool      = "true or false"
	wantRequestID = "1 to 256 printable ASCII characters without spaces"
	wantClusterID = "1 to 256 visible ASCII characters"
)

// MaxRequestIDLen caps x-request-id. The hub only requires visible ASCII,
// so this follows the gateway's cap on the other client-chosen identifier,
// the session id (docs/design/sessions.md#validation).
const MaxRequestIDLen = 256

// MaxClusterIDLen caps a cluster id the gateway stores or sends as
// x-stargate-last-cluster-id; longer values are not stored, which bounds
// every entry of the shared last-cluster store.
const MaxClusterIDLen = 256

// ParseUint64 parses the value of the unsigned 64-bit header name
// (x-input-tokens, x-output-tokens, x-request-slo-ms, x-max-wait-ms,
// x-stargate-max-wait-ms, x-stargate-expected-queue-ms, ...). Surrounding
// spaces and tabs are trimmed and a blank value is an error
// (docs/design/headers.md#parsing-rules). Only ASCII digits are accepted:
// no sign (RFC 9110 and RFC 8941 integers have none, and FormatUint never
// writes one), no inner space, no base prefix. Leading zeros are accepted,
// as upstream Stargate's parser does.
func ParseUint64(name, value string) (uint64, error) {
	return parseUint(name, value, math.MaxUint64, wantUint64)
}

// ParseUint32 parses the value of the unsigned 32-bit header name, which
// is x-priority at the hub and at pylon, with the rules of ParseUint64.
func ParseUint32(name, value string) (uint32, error) {
	v, err := parseUint(name, value, math.MaxUint32, wantUint32)
	return uint32(v), err
}

func parseUint(name, value string, limit uint64, want string) (uint64, error) {
	s := trimOWS(value)
	if s == "" {
		return 0, &Error{Header: name, Want: want, Err: ErrEmpty}
	}
	// Check every byte before accumulating so "99999999999999999999x" is
	// reported as malformed rather than out of range.
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, &Error{Header: name, Want: want, Err: ErrSyntax}
		}
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		d := uint64(s[i] - '0')
		if n > (limit-d)/10 {
			return 0, &Error{Header: name, Want: want, Err: ErrRange}
		}
		n = n*10 + d
	}
	return n, nil
}

// FormatUint formats v for any of the integer headers; ParseUint64 and
// ParseUint32 accept exactly what it returns.
func FormatUint(v uint64) string { return strconv.FormatUint(v, 10) }

// GetUint64 reads the unsigned 64-bit header name from h. present is false
// only when the header is absent; a present but blank or malformed value
// returns present == true and an error, because the hub answers 400 to it
// instead of treating it as absent. Like net/http's Get it reads the first
// value.
func GetUint64(h http.Header, name string) (v uint64, present bool, err error) {
	vs := h[canonicalKey(name)]
	if len(vs) == 0 {
		return 0, false, nil
	}
	v, err = ParseUint64(name, vs[0])
	return v, true, err
}

// GetUint32 is GetUint64 for x-priority.
func GetUint32(h http.Header, name string) (v uint32, present bool, err error) {
	vs := h[canonicalKey(name)]
	if len(vs) == 0 {
		return 0, false, nil
	}
	v, err = ParseUint32(name, vs[0])
	return v, true, err
}

// MillisDuration converts a millisecond header value to a Duration,
// saturating at the largest Duration instead of wrapping: the hub accepts
// any u64 for x-max-wait-ms and x-stargate-max-wait-ms and caps or
// overflow-checks it itself.
func MillisDuration(ms uint64) time.Duration {
	const maxMs = uint64(math.MaxInt64 / int64(time.Millisecond))
	if ms > maxMs {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(ms) * time.Millisecond
}

// FormatMillis formats d as whole milliseconds, rounded down, with negative
// durations as 0. Rounding down means a budget derived from the remaining
// deadline (x-stargate-max-wait-ms) never promises time that is not there;
// under 1 ms left gives 0, which disables retries.
func FormatMillis(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	return strconv.FormatInt(int64(d/time.Millisecond), 10)
}

// MaxDeadline bounds x-stargate-deadline-ms: a day, far above any model's
// answer time and the gateway's own bound on a client's timeout, so a
// larger value can only come from a broken sender. Every tier refuses it
// instead of treating it as no deadline, which would hide the bug.
const MaxDeadline = 24 * time.Hour

const wantDeadline = "a decimal integer from 0 to 86400000"

// GetDeadline reads x-stargate-deadline-ms from h as the remaining budget.
// present is false only when the header is absent; a blank or malformed
// value, or one above MaxDeadline, returns present == true and an error
// naming the header (ErrRange for one too large), which the hub and the
// pylon answer with 400. 0 is valid: a deadline that has passed.
func GetDeadline(h http.Header) (d time.Duration, present bool, err error) {
	vs := h[canonicalKey(StargateDeadlineMs)]
	if len(vs) == 0 {
		return 0, false, nil
	}
	ms, err := parseUint(StargateDeadlineMs, vs[0], uint64(MaxDeadline/time.Millisecond), wantDeadline)
	if err != nil {
		return 0, true, err
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// DeadlineMillis is what is left of a deadline, left, as the value of
// x-stargate-deadline-ms: whole milliseconds rounded up, and 0 when
// nothing is left. Rounding up (unlike FormatMillis) keeps each tier's
// deadline at or after the one of the tier that sent it, transit
// included: the tier closest to the client ends a request first, in its
// own answer shape, and the later tiers' deadlines only end work whose
// cancellation was lost, at most 1 ms later.
func DeadlineMillis(left time.Duration) uint64 {
	if left <= 0 {
		return 0
	}
	return uint64((left + time.Millisecond - 1) / time.Millisecond)
}

// ParseBool parses a boolean header: x-kv-cache-hit, x-stargate-retryable
// and x-stargate-upstream-retryable. Surrounding spaces and tabs are trimmed
// and true or false match in any ASCII letter case, because the hub
// compares x-stargate-retryable case-insensitively. Anything else is an
// error; the hub treats such a value as not true, so callers that decide
// retries should do the same.
func ParseBool(name, value string) (bool, error) {
	s := trimOWS(value)
	switch {
	case s == "":
		return false, &Error{Header: name, Want: wantBool, Err: ErrEmpty}
	case equalFoldASCII(s, "true"):
		return true, nil
	case equalFoldASCII(s, "false"):
		return false, nil
	}
	return false, &Error{Header: name, Want: wantBool, Err: ErrSyntax}
}

// FormatBool formats b as true or false, the form the mock engine and
// pylon write.
func FormatBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// GetBool reads the boolean header name from h with the presence rules of
// GetUint64.
func GetBool(h http.Header, name string) (v bool, present bool, err error) {
	vs := h[canonicalKey(name)]
	if len(vs) == 0 {
		return false, false, nil
	}
	v, err = ParseBool(name, vs[0])
	return v, true, err
}

// ParseText applies the hub's rule for text headers (x-model,
// x-routing-key, x-cache-affinity-key, x-stargate-last-cluster-id): the
// value must be visible ASCII (bytes 0x20-0x7E and tab, the set upstream
// Stargate's HTTP library accepts), surrounding spaces and tabs are
// trimmed, and a blank or non-ASCII value is absent rather than an error,
// so only a required header turns it into a 400. ok is false when the
// header counts as absent.
func ParseText(value string) (text string, ok bool) {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c != '\t' && (c < 0x20 || c > 0x7e) {
			return "", false
		}
	}
	s := trimOWS(value)
	return s, s != ""
}

// GetText reads the text header name from h with ParseText's rules; an
// absent header and a blank or non-ASCII one are both reported as ok ==
// false, as the hub does.
func GetText(h http.Header, name string) (text string, ok bool) {
	vs := h[canonicalKey(name)]
	if len(vs) == 0 {
		return "", false
	}
	return ParseText(vs[0])
}

// ValidateRequestID reports whether id is an acceptable x-request-id: 1 to
// MaxRequestIDLen bytes, each printable ASCII other than space (0x21-0x7E).
// The hub only requires visible ASCII; excluding spaces and capping the
// length keeps the id safe to log, to put on spans and to echo to the
// client, as the gateway does on every response. It does not trim.
func ValidateRequestID(id string) error {
	switch {
	case id == "":
		return &Error{Header: RequestID, Want: wantRequestID, Err: ErrEmpty}
	case len(id) > MaxRequestIDLen:
		return &Error{Header: RequestID, Want: wantRequestID, Err: ErrTooLong}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x21 || c > 0x7e {
			return &Error{Header: RequestID, Want: wantRequestID, Err: ErrInvalidChar}
		}
	}
	return nil
}

// ParseRequestID trims surrounding spaces and tabs from an x-request-id
// value, as the hub does, and validates the rest with ValidateRequestID. A
// gateway that gets an error here generates a fresh id instead of refusing
// the request, since the id is only a correlation handle.
func ParseRequestID(value string) (string, error) {
	id := trimOWS(value)
	if err := ValidateRequestID(id); err != nil {
		return "", err
	}
	return id, nil
}

// ParseClusterID validates a cluster id taken from x-stargate-cluster-id
// before the gateway stores it, or read back from the store before it is
// sent as x-stargate-last-cluster-id: surrounding spaces and tabs are
// trimmed, and the rest must be 1 to MaxClusterIDLen bytes of 0x20-0x7E, so
// the stored value is always a valid header value. Errors name
// x-stargate-cluster-id, where the value came from.
func ParseClusterID(value string) (string, error) {
	id := trimOWS(value)
	switch {
	case id == "":
		return "", &Error{Header: StargateClusterID, Want: wantClusterID, Err: ErrEmpty}
	case len(id) > MaxClusterIDLen:
		return "", &Error{Header: StargateClusterID, Want: wantClusterID, Err: ErrTooLong}
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return "", &Error{Header: StargateClusterID, Want: wantClusterID, Err: ErrInvalidChar}
		}
	}
	return id, nil
}

// trimOWS removes the optional whitespace (space and tab) RFC 9110 §5.6.3
// allows around a field value.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// equalFoldASCII compares s with the lower-case ASCII word, ignoring ASCII
// case only. strings.EqualFold would also fold U+017F (long s) to 's', so
// "fal\u017fe" would pass as false.
func equalFoldASCII(s, word string) bool {
	return len(s) == len(word) && hasPrefixFold(s, word)
}

// IsStreamingContentType reports whether a response of this Content-Type is
// a stream whose parts must reach the client as they are written (SSE or
// NDJSON): relays flush those after every chunk and send their headers at
// once, and let the HTTP server buffer everything else.
func IsStreamingContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(mt)
	return strings.EqualFold(mt, "text/event-stream") || strings.EqualFold(mt, "application/x-ndjson")
}
