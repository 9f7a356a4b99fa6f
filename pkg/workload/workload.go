package workload

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// Version is the format version written in every header.
const Version = 1

// CharsPerToken is how many bytes of text make one token, the mock
// engine's default tokeniser estimate; UserText sizes its text with it.
const CharsPerToken = 4

// Modes of a workload.
const (
	// ModeOpen sends each request at its AtMs offset from the start,
	// whatever the answers of earlier ones (an open-loop rate).
	ModeOpen = "open"
	// ModeClosed runs Workers workers, each sending its own requests in
	// file order, the next one when the previous has finished.
	ModeClosed = "closed"
)

// Session sources: how a request names its session to the gateway
// (docs/design/sessions.md#session-sources).
const (
	SourcePromptCacheKey = "prompt_cache_key"
	SourceConversation   = "conversation"
	SourceHeader         = "header" // x-multi-turn-session-id
	SourceNone           = "none"   // anonymous: no session id (a one-shot, or a conversation linked by content only)
)

// Header is the first line of a workload file.
type Header struct {
	V     int    `json:"v"`
	Suite string `json:"suite"`
	Seed  uint64 `json:"seed"`
	Model string `json:"model"`
	Mode  string `json:"mode"`
	// Workers is the closed-loop worker count (0 for open loop).
	Workers int `json:"workers,omitempty"`
	// DurationMs bounds an open-loop workload's send window.
	DurationMs int64 `json:"duration_ms,omitempty"`
	// Params records the generator's parameters, for the report.
	Params map[string]any `json:"params,omitempty"`
}

// Request is one request of a workload, one line after the header.
type Request struct {
	// Index is the request's position in the file, from 0.
	Index int `json:"i"`
	// AtMs is the open-loop send offset from the start of the run.
	AtMs int64 `json:"at_ms"`
	// Worker is the closed-loop worker that sends it (0 for open loop).
	Worker int `json:"worker"`
	// Session names the conversation; empty for an anonymous one-shot
	// request. With source none it names an anonymous conversation: the
	// file links its turns (each re-sends the ones before) but the client
	// sends no session id, so only their content links them.
	Session string `json:"session,omitempty"`
	// Turn is the 1-based turn within the session; turn n's prompt is the
	// whole conversation so far (every earlier user message and reply)
	// plus this turn's new user message.
	Turn int `json:"turn"`
	// Source is how the session is named to the gateway (Source*).
	Source string `json:"source"`
	// Stream labels a sub-stream of a mixed workload ("hot", "short").
	Stream string `json:"stream,omitempty"`
	// Endpoint is "chat" (/v1/chat/completions) or "responses".
	Endpoint string `json:"endpoint"`
	// NewInputTokens is the size of this turn's new user message.
	NewInputTokens int `json:"new_input_tokens"`
	// OutputTokens is the reply length asked for (x-output-tokens on the
	// mock engine, max_tokens otherwise).
	OutputTokens int `json:"output_tokens"`
	// Prefix names the shared text a conversation opens with, sent as a
	// system message before its first user message; empty for none. Every
	// request naming the same prefix opens with the same text
	// (PrefixText), so requests that share no session key still share a
	// cached prefix: the link a content-aware router can follow. Only a
	// first turn names it; later turns re-send it as history.
	Prefix string `json:"prefix,omitempty"`
	// PrefixTokens is the size of the prefix's text; every request naming
	// one prefix gives the same size.
	PrefixTokens int `json:"prefix_tokens,omitempty"`
}

// Validate checks a request against its header.
func (r *Request) Validate(h *Header) error {
	switch {
	case r.Turn < 1:
		return fmt.Errorf("request %d: turn %d, want ≥ 1", r.Index, r.Turn)
	case r.NewInputTokens < 1 || r.OutputTokens < 1:
		return fmt.Errorf("request %d: new_input_tokens and output_tokens must be ≥ 1", r.Index)
	case r.Session == "" && (r.Turn != 1 || r.Source != SourceNone):
		return fmt.Errorf("request %d: an anonymous request is turn 1 with source none", r.Index)
	case (r.Prefix == "") != (r.PrefixTokens == 0) || r.PrefixTokens < 0:
		return fmt.Errorf("request %d: prefix %q with prefix_tokens %d: want both or neither, tokens ≥ 1", r.Index, r.Prefix, r.PrefixTokens)
	case r.Prefix != "" && r.Turn != 1:
		return fmt.Errorf("request %d: prefix %q on turn %d: only a first turn opens with a prefix", r.Index, r.Prefix, r.Turn)
	case r.Endpoint != "chat" && r.Endpoint != "responses":
		return fmt.Errorf("request %d: endpoint %q, want chat or responses", r.Index, r.Endpoint)
	case h.Mode == ModeClosed && (r.Worker < 0 || r.Worker >= h.Workers):
		return fmt.Errorf("request %d: worker %d outside 0..%d", r.Index, r.Worker, h.Workers-1)
	case h.Mode == ModeOpen && r.AtMs < 0:
		return fmt.Errorf("request %d: negative at_ms", r.Index)
	}
	switch r.Source {
	case SourcePromptCacheKey, SourceConversation, SourceHeader, SourceNone:
	default:
		return fmt.Errorf("request %d: unknown source %q", r.Index, r.Source)
	}
	return nil
}

// Workload is a header and its requests.
type Workload struct {
	Header   Header
	Requests []Request
}

// Write writes w as JSON Lines. The same workload always produces the same
// bytes (struct fields marshal in declaration order, Params keys sorted).
func (w *Workload) Write(out io.Writer) error {
	bw := bufio.NewWriter(out)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	h := w.Header
	h.V = Version
	if err := enc.Encode(&h); err != nil {
		return err
	}
	for i := range w.Requests {
		if err := enc.Encode(&w.Requests[i]); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteFile writes w to path and returns the file's fingerprint.
func (w *Workload) WriteFile(path string) (string, error) {
	f, err := os.Create(path) //nolint:gosec // G304: the path is the operator's own flag
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if err := w.Write(io.MultiWriter(f, h)); err != nil {
		_ = f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Read parses a workload file, validating every line; it rejects unknown
// fields and another format version.
func Read(in io.Reader) (*Workload, error) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var w Workload
	line := 0
	for sc.Scan() {
		line++
		if line == 1 {
			if err := decodeLine(sc.Bytes(), &w.Header); err != nil {
				return nil, fmt.Errorf("workload line 1 (header): %w", err)
			}
			if w.Header.V != Version {
				return nil, fmt.Errorf("workload format v%d, this build reads v%d", w.Header.V, Version)
			}
			if w.Header.Mode != ModeOpen && w.Header.Mode != ModeClosed {
				return nil, fmt.Errorf("workload header: mode %q, want open or closed", w.Header.Mode)
			}
			if w.Header.Mode == ModeClosed && w.Header.Workers < 1 {
				return nil, fmt.Errorf("workload header: a closed-loop workload needs workers ≥ 1, got %d", w.Header.Workers)
			}
			continue
		}
		var r Request
		if err := decodeLine(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("workload line %d: %w", line, err)
		}
		if r.Index != len(w.Requests) {
			return nil, fmt.Errorf("workload line %d: index %d, want %d", line, r.Index, len(w.Requests))
		}
		if err := r.Validate(&w.Header); err != nil {
			return nil, fmt.Errorf("workload line %d: %w", line, err)
		}
		w.Requests = append(w.Requests, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if line == 0 {
		return nil, errors.New("workload: empty file")
	}
	if err := checkPrefixes(w.Requests); err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	return &w, nil
}

// checkPrefixes rejects a prefix named with two sizes: its requests would
// not share the text the file says they share.
func checkPrefixes(reqs []Request) error {
	size := map[string]int{}
	for i := range reqs {
		r := &reqs[i]
		if r.Prefix == "" {
			continue
		}
		if n, ok := size[r.Prefix]; ok && n != r.PrefixTokens {
			return fmt.Errorf("request %d: prefix %q has %d tokens, an earlier request gave it %d", r.Index, r.Prefix, r.PrefixTokens, n)
		}
		size[r.Prefix] = r.PrefixTokens
	}
	return nil
}

// decodeLine decodes one line holding exactly one JSON object into v:
// unknown fields and anything after the object (a second object, stray
// text) are errors, so a damaged or hand-edited file fails loudly instead
// of replaying something else than it says.
func decodeLine(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON object at byte %d", dec.InputOffset())
	}
	return nil
}

// ReadFile reads a workload file and returns it with its fingerprint.
func ReadFile(path string) (*Workload, string, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the path is the operator's own flag
	if err != nil {
		return nil, "", err
	}
	w, err := Read(bytes.NewReader(b))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(b)
	return w, hex.EncodeToString(sum[:]), nil
}

// words is the vocabulary of generated text: short, distinct and ASCII, so
// byte length is predictable.
var words = [...]string{"alpha", "bravo", "delta", "echo", "kilo", "lima", "mike", "oscar", "papa", "romeo",
	"sierra", "tango", "victor", "xray", "yankee", "zulu"}

// UserText is the deterministic text of the new user message of (seed,
// session, turn): exactly tokens·CharsPerToken bytes, different for every
// (seed, session, turn) from its first bytes on, so that two sessions never
// share a cached prefix by accident. An anonymous request passes its index
// as the session ("#<index>").
func UserText(seed uint64, session string, turn, tokens int) string {
	n := tokens * CharsPerToken
	b := make([]byte, 0, n+16)
	// A header that names the message keeps prefixes of different
	// sessions apart even in their first block.
	b = fmt.Appendf(b, "[%s t%d] ", session, turn)
	var key [8]byte
	sum := sha256.New()
	binary.LittleEndian.PutUint64(key[:], seed)
	sum.Write(key[:])
	sum.Write([]byte(session))
	binary.LittleEndian.PutUint64(key[:], uint64(turn))
	sum.Write(key[:])
	state := binary.LittleEndian.Uint64(sum.Sum(nil))
	for len(b) < n {
		// xorshift64*: cheap and deterministic.
		state ^= state >> 12
		state ^= state << 25
		state ^= state >> 27
		w := words[(state*2685821657736338717)>>60]
		b = append(b, w...)
		b = append(b, ' ')
	}
	return string(b[:n])
}

// PrefixRole is the role of the message that carries a request's shared
// prefix (Request.Prefix): a system prompt, or the document a question is
// asked about.
const PrefixRole = "system"

// PrefixText is the text of the shared prefix name: exactly
// tokens·CharsPerToken bytes, the same wherever name is sent and
// different for every (seed, name). A replay passes the prefix name as
// it salts it, so runs under two salts share no prefix.
func PrefixText(seed uint64, name string, tokens int) string {
	return UserText(seed, "prefix:"+name, 0, tokens)
}

// PrefixMessage is the prefix name's message as the mock engine lays it
// out (MessageBytes), the bytes a first turn's prompt starts with.
func PrefixMessage(seed uint64, name string, tokens int) []byte {
	return MessageBytes(PrefixRole, PrefixText(seed, name, tokens))
}
