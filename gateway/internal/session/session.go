package session

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/stargate-router/stargate/pkg/headers"
)

// Source says where a session id came from. The values are the source
// labels of upstream Stargate's gateway; the middle part of an affinity
// key is "session" or "payload", not the source.
type Source string

// The session sources, in no particular order; precedence is Derive's.
const (
	SourceNone           Source = ""
	SourcePromptCacheKey Source = "prompt_cache_key"
	SourceConversationID Source = "conversation_id"
	SourceHeader         Source = "header"
	SourcePayload        Source = "payload"
)

// Eligible reports whether last-cluster tracking may use the source
// (docs/design/sessions.md#last-cluster-tracking): only client-chosen ids,
// never the payload hash, which changes every turn as the history grows.
func (s Source) Eligible() bool {
	return s == SourcePromptCacheKey || s == SourceConversationID || s == SourceHeader
}

// MaxIDLen caps a session id in bytes
// (docs/design/sessions.md#validation).
const MaxIDLen = 256

// Errors returned (wrapped) by Validate.
var (
	ErrEmpty       = errors.New("must not be empty")
	ErrTooLong     = fmt.Errorf("must be at most %d bytes", MaxIDLen)
	ErrControlChar = errors.New("must not contain control characters")
	ErrInvalidUTF8 = errors.New("must be valid UTF-8")
)

// Validate checks a session id (docs/design/sessions.md#validation):
// non-empty, at most MaxIDLen bytes, no byte below 0x20 and no 0x7F.
// Non-ASCII UTF-8 is allowed; invalid UTF-8 is not, because the id is
// echoed in a response header.
func Validate(id string) error {
	switch {
	case id == "":
		return ErrEmpty
	case len(id) > MaxIDLen:
		return ErrTooLong
	case !utf8.ValidString(id):
		return ErrInvalidUTF8
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c == 0x7f {
			return ErrControlChar
		}
	}
	return nil
}

// Session is a derived session.
type Session struct {
	// ID is echoed to the client as x-multi-turn-session-id: the raw
	// client id, or the affinity key for payload sessions, so a client can
	// send it back to continue the session.
	ID string
	// Source is where ID came from.
	Source Source
	// AffinityKey is sent to the hub as x-cache-affinity-key.
	AffinityKey string
	// Anchor is a payload session's conversation anchor; zero for other
	// sources and when Inputs.Anchor is off.
	Anchor Anchor
}

// AnchorPrefix starts every conversation anchor. It is not mt:, so no
// affinity key a client can send in x-multi-turn-session-id names the
// same last-cluster entry as an anchor.
const AnchorPrefix = "ca:v1:"

// Anchor names a keyless conversation across its turns
// (docs/design/sessions.md#conversation-anchor). The payload key changes
// every turn as the history grows; the payload up to and including the
// first user message does not, and it differs between conversations that
// share only a system prompt. It keys last-cluster tracking only: the hub
// still routes on the payload key.
type Anchor struct {
	// Key is AnchorPrefix + hex SHA-256 of the payload bytes up to and
	// including the first user message; "" when there is none.
	Key string
	// Later reports that the request holds more than its first user
	// message, so an earlier turn may have recorded the anchor. A first
	// turn cannot find anything: its lookup is skipped.
	Later bool
}

// Inputs are the candidate sources of one request. Pointers are nil when
// the field is absent; an empty body value counts as absent.
type Inputs struct {
	// Header is the raw x-multi-turn-session-id value; HeaderSet reports
	// whether the header was present at all.
	Header    string
	HeaderSet bool
	// PromptCacheKey and ConversationID come from the body.
	PromptCacheKey *string
	ConversationID *string
	// Payload appends the bytes the payload fallback hashes to its
	// argument and returns the result, with the index in it where the
	// conversation anchor's bytes end (-1: no anchor); nil means no
	// fallback (embeddings). Derive hashes them in a buffer it reuses.
	Payload func(dst []byte) (b []byte, anchorEnd int)
	// Anchor derives a payload session's conversation anchor. It costs
	// no second pass over the bytes: the anchor's are a prefix of the
	// payload's, hashed once.
	Anchor bool
}

// Error is a 400-worthy validation failure; Message is the client-facing
// text, naming the source (docs/design/sessions.md#validation).
type Error struct {
	Param   string
	Message string
	Err     error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the validation sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Derive applies the precedence prompt_cache_key > conversation id >
// x-multi-turn-session-id > payload hash
// (docs/design/sessions.md#session-sources). The header is trimmed and
// validated first, even when a body source wins, so a bad header fails
// whatever else the request carries; body values are not trimmed.
func Derive(in Inputs) (Session, error) {
	var header string
	if in.HeaderSet {
		header = strings.TrimSpace(in.Header)
		if err := Validate(header); err != nil {
			return Session{}, &Error{Param: "x-multi-turn-session-id", Message: "x-multi-turn-session-id is invalid: " + err.Error(), Err: err}
		}
	}
	for _, c := range []struct {
		v   *string
		src Source
	}{{in.PromptCacheKey, SourcePromptCacheKey}, {in.ConversationID, SourceConversationID}} {
		if c.v == nil || *c.v == "" {
			continue
		}
		if err := Validate(*c.v); err != nil {
			return Session{}, &Error{Param: string(c.src), Message: "session id from " + string(c.src) + " is invalid: " + err.Error(), Err: err}
		}
		return Session{ID: *c.v, Source: c.src, AffinityKey: Hashed("session", *c.v)}, nil
	}
	if in.HeaderSet {
		key := header
		if !IsAffinityKey(header) {
			key = Hashed("session", header)
		}
		return Session{ID: header, Source: SourceHeader, AffinityKey: key}, nil
	}
	if in.Payload != nil {
		sum, anchor := payloadSum(in.Payload, in.Anchor)
		key := headers.PayloadKeyPrefix + hex.EncodeToString(sum[:])
		return Session{ID: key, Source: SourcePayload, AffinityKey: key, Anchor: anchor}, nil
	}
	return Session{}, nil
}

// payloadBufs recycles the buffers payloads are laid out in to be
// hashed: a payload is as large as the conversation, and is garbage as
// soon as it is hashed.
var payloadBufs sync.Pool

// maxKeptPayload bounds a buffer payloadBufs keeps, so one huge request
// does not pin its size.
const maxKeptPayload = 1 << 20

// payloadSum is the sha256 of the bytes payload appends and, with
// anchor, the conversation anchor their first anchorEnd bytes make.
func payloadSum(payload func(dst []byte) ([]byte, int), anchor bool) ([sha256.Size]byte, Anchor) {
	bp, _ := payloadBufs.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b, end := payload((*bp)[:0])
	var sum [sha256.Size]byte
	var a Anchor
	if anchor && end >= 0 && end <= len(b) {
		// One pass: the hash's state at the anchor's end is summed, then
		// it goes on over the rest of the payload.
		var mid [sha256.Size]byte
		h := sha256.New()
		h.Write(b[:end])
		a = Anchor{Key: anchorKey(h.Sum(mid[:0])), Later: laterTurn(b[end:])}
		h.Write(b[end:])
		copy(sum[:], h.Sum(mid[:0]))
	} else {
		sum = sha256.Sum256(b)
	}
	if cap(b) <= maxKeptPayload {
		*bp = b
		payloadBufs.Put(bp)
	}
	return sum, a
}

// anchorKey is AnchorPrefix + hex sum, built in one allocation.
func anchorKey(sum []byte) string {
	var k [len(AnchorPrefix) + 2*sha256.Size]byte
	copy(k[:], AnchorPrefix)
	hex.Encode(k[len(AnchorPrefix):], sum)
	return string(k[:])
}

// laterTurn reports whether rest, the payload after the first user
// message, holds another item: more than the array's closing bracket.
func laterTurn(rest []byte) bool { return len(rest) > 1 }

// Hashed returns mt:v1:<kind>:<hex sha256(v)>.
func Hashed(kind, v string) string {
	sum := sha256.Sum256([]byte(v))
	return "mt:v1:" + kind + ":" + hex.EncodeToString(sum[:])
}

// IsAffinityKey reports whether s already is an affinity key: exactly four
// colon-separated parts mt, v1, any middle, and 64 hex digits in either
// case (docs/design/sessions.md#affinity-key). Such header values are sent
// verbatim so a client echoing a returned session id keeps its key.
func IsAffinityKey(s string) bool {
	parts := strings.Split(s, ":")
	if len(parts) != 4 || parts[0] != "mt" || parts[1] != "v1" || len(parts[3]) != 64 {
		return false
	}
	for i := 0; i < 64; i++ {
		c := parts[3][i]
		if !isHex(c) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
