package prefix

import (
	"sync"
	"unicode/utf8"

	"github.com/valyala/fastjson"

	"github.com/stargate-router/stargate/gateway/internal/request"
	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// scratch is one summary's reusable state: the hasher, and the parser and
// buffer for the parts of a body the gateway's own parse tree does not
// keep in the form the layout needs.
type scratch struct {
	h   *prefixhash.Hasher
	p   fastjson.Parser
	buf []byte
}

// maxKeptBuf bounds the buffer a pooled scratch keeps, so one huge image
// part does not pin its size in the pool.
const maxKeptBuf = 64 << 10

// scratches recycles scratch: a Hasher and a fastjson parser each own
// buffers that would otherwise be allocated again for every request.
var scratches = sync.Pool{New: func() any {
	return &scratch{h: prefixhash.NewHasher(prefixhash.DefaultBlockTokens, prefixhash.DefaultCharsPerToken)}
}}

func getScratch() *scratch {
	s, _ := scratches.Get().(*scratch)
	s.h.Reset()
	return s
}

func putScratch(s *scratch) {
	if cap(s.buf) > maxKeptBuf {
		s.buf = nil
	}
	scratches.Put(s)
}

// Header returns the x-stargate-prompt-prefix value for r, which was
// parsed from body: the prompt's Summary at the default geometry (16-token
// blocks of 4 bytes per token), or "" when the request has none (see the
// package comment).
func Header(r *request.Request, body []byte) string {
	s := getScratch()
	defer putScratch(s)
	if !s.render(s.h, r, body) || s.h.Blocks() == 0 {
		return ""
	}
	var buf [prefixhash.MaxHeaderLen]byte
	return string(s.h.AppendHeader(buf[:0]))
}

// Summarize returns the Summary Header encodes, and false when there is
// none.
func Summarize(r *request.Request, body []byte) (prefixhash.Summary, bool) {
	s := getScratch()
	defer putScratch(s)
	if !s.render(s.h, r, body) || s.h.Blocks() == 0 {
		return prefixhash.Summary{}, false
	}
	return s.h.Summary(), true
}

// render writes r's prompt to w in prefixhash's layout. False means the
// engine would refuse the body, or the endpoint has no prompt to cache.
func (s *scratch) render(w prefixhash.Writer, r *request.Request, body []byte) bool {
	switch r.Endpoint {
	case request.Chat:
		return s.chat(w, r.Chat, body)
	case request.Responses:
		return s.responses(w, r.Resp, body)
	case request.Completions:
		// The prompt as the body wrote it: the parse's compact copy
		// re-escapes bytes that are not UTF-8, which the engine's decoder
		// replaces with U+FFFD instead (a finding of FuzzRenderMatchesEngine).
		prompt := member(body, "prompt")
		if prompt == nil {
			prompt = r.Prompt
		}
		return s.completion(w, prompt)
	}
	return false
}

// writeText writes a string the way the engine's decoder holds it:
// encoding/json replaces every byte that is not valid UTF-8 with U+FFFD,
// while the gateway's parser keeps such bytes as sent.
func writeText(w prefixhash.Writer, s string) {
	if utf8.ValidString(s) {
		_, _ = w.WriteString(s)
		return
	}
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			_, _ = w.WriteString("\uFFFD")
		} else {
			_, _ = w.WriteString(s[:n])
		}
		s = s[n:]
	}
}

// writeBytes is writeText for text still in the parser's buffer, so it is
// not copied into a string first.
func writeBytes(w prefixhash.Writer, b []byte) {
	if utf8.Valid(b) {
		_, _ = w.Write(b)
		return
	}
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			_, _ = w.WriteString("\uFFFD")
		} else {
			_, _ = w.Write(b[:n])
		}
		b = b[n:]
	}
}

// validText is writeText's replacement as a string, for the short role
// names the layout writes through StartMessage.
func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	out := make([]byte, 0, len(s)+8)
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError && n == 1 {
			out = append(out, "\uFFFD"...)
		} else {
			out = append(out, s[:n]...)
		}
		s = s[n:]
	}
	return string(out)
}
