package proxy

import (
	"encoding/json"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/powerofn"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// serveLocal runs one request through the proxy's handler without the
// network, so header values no HTTP client would send can be tried.
func serveLocal(p *Proxy, method string, hdr http.Header, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "/v1/chat/completions", strings.NewReader(body))
	r.Header = hdr
	w := httptest.NewRecorder()
	p.Handler().ServeHTTP(w, r)
	return w
}

func decodeError(t *testing.T, w *httptest.ResponseRecorder) *openai.Error {
	t.Helper()
	resp := w.Result()
	defer func() { _ = resp.Body.Close() }()
	return openAIError(t, resp, w.Body.String())
}

// step is one check of docs/design/hub-request.md#parse-order in its order:
// break sets a header so that the step fails.
type step struct {
	name      string
	breakStep func(h http.Header)
}

// parseSteps are the failing variants of every step, in parse order. A
// case breaks its own step and every later one, so the error proves which
// check runs first.
var parseSteps = []step{
	{"1 x-request-id", func(h http.Header) { h.Del(headers.RequestID) }},
	{"2 x-input-tokens", func(h http.Header) { h.Set(headers.InputTokens, "many") }},
	{"3 x-model", func(h http.Header) { h.Del(headers.Model) }},
	{"4 x-routing-method unknown", func(h http.Header) { h.Set(headers.RoutingMethod, "bogus") }},
	{"5 x-priority", func(h http.Header) { h.Set(headers.Priority, "-1") }},
	{"6a x-max-wait-ms", func(h http.Header) { h.Set(headers.MaxWaitMs, "soon") }},
	{"6b x-request-slo-ms", func(h http.Header) { h.Set(headers.RequestSLOMs, "1e3") }},
	{"8 x-routing-method unavailable", func(h http.Header) { h.Set(headers.RoutingMethod, "round_robin") }},
	{"10 retry budget", func(h http.Header) { h.Set(headers.StargateMaxWaitMs, "+5") }},
}

func TestHeaderParsingOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil, func(c *Config) { c.MaxReplayBodyBytes = 64 })
	want := []struct{ param, code string }{
		{headers.RequestID, "missing_header"},
		{headers.InputTokens, "invalid_header"},
		{headers.Model, "missing_header"},
		{headers.RoutingMethod, "unknown_method"},
		{headers.Priority, "invalid_header"},
		{headers.MaxWaitMs, "invalid_header"},
		{headers.RequestSLOMs, "invalid_header"},
		{headers.RoutingMethod, "unavailable"},
		{headers.StargateMaxWaitMs, "invalid_header"},
	}
	// An oversized body is step 11: every case also sends one, so the 400
	// must come first.
	big := strings.Repeat("x", 65)
	for i, st := range parseSteps {
		t.Run(st.name, func(t *testing.T) {
			hdr := validHeaders()
			for j := len(parseSteps) - 1; j >= i; j-- { // later steps first: the earliest break wins a shared header
				parseSteps[j].breakStep(hdr)
			}
			w := serveLocal(h.p, http.MethodPost, hdr, big)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", w.Code, w.Body)
			}
			e := decodeError(t, w)
			if e.Param != want[i].param || e.Code != want[i].code || e.Type != openai.TypeInvalidRequest {
				t.Errorf("error %+v, want param %s code %s", e, want[i].param, want[i].code)
			}
		})
	}
	if n := len(h.hits()); n != 0 {
		t.Errorf("a backend was called for a rejected request: %v", h.hits())
	}
	wantSeries(t, "requests_total", h.m.requests, series{})
	wantSeries(t, "proxy_attempts_total", h.m.attempts, series{})
}

// Every way a header can be wrong, one at a time on an otherwise valid
// request.
func TestHeaderParsingValues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, tc := range []struct {
		name, header, value string // value "<del>" removes the header
		code                string
		param               string // defaults to header
	}{
		{"request id missing", headers.RequestID, "<del>", "missing_header", ""},
		{"request id blank", headers.RequestID, " \t ", "missing_header", ""},
		{"request id not ASCII", headers.RequestID, "r\u00e9q", "missing_header", ""},
		{"input tokens missing", headers.InputTokens, "<del>", "missing_header", ""},
		{"input tokens blank", headers.InputTokens, "  ", "invalid_header", ""},
		{"input tokens negative", headers.InputTokens, "-1", "invalid_header", ""},
		{"input tokens signed", headers.InputTokens, "+1", "invalid_header", ""},
		{"input tokens fraction", headers.InputTokens, "1.5", "invalid_header", ""},
		{"input tokens overflow", headers.InputTokens, "18446744073709551616", "invalid_header", ""},
		{"input tokens above the bound", headers.InputTokens, "4294967296", "invalid_header", ""},
		{"input tokens u64 max", headers.InputTokens, "18446744073709551615", "invalid_header", ""},
		{"model missing", headers.Model, "<del>", "missing_header", ""},
		{"model blank", headers.Model, "\t", "missing_header", ""},
		{"model control byte", headers.Model, "m\x00", "missing_header", ""},
		{"routing method unknown", headers.RoutingMethod, "fastest", "unknown_method", ""},
		{"routing method blank", headers.RoutingMethod, "  ", "invalid_routing_method", ""},
		{"routing method not ASCII", headers.RoutingMethod, "power-of-n\u00a0", "invalid_routing_method", ""},
		{"routing method unavailable: random", headers.RoutingMethod, "random", "unavailable", ""},
		{"routing method unavailable: W&W alias", headers.RoutingMethod, "Groq_MultiRegion", "unavailable", ""},
		{"routing method unavailable: pulsar", headers.RoutingMethod, "PULSAR", "unavailable", ""},
		{"priority above u32", headers.Priority, "4294967296", "invalid_header", ""},
		{"priority blank", headers.Priority, "", "invalid_header", ""},
		{"priority hex", headers.Priority, "0x1", "invalid_header", ""},
		{"max wait negative", headers.MaxWaitMs, "-250", "invalid_header", ""},
		{"max wait inner space", headers.MaxWaitMs, "2 50", "invalid_header", ""},
		{"slo blank", headers.RequestSLOMs, " ", "invalid_header", ""},
		{"slo overflow", headers.RequestSLOMs, "99999999999999999999", "invalid_header", ""},
		{"budget malformed", headers.StargateMaxWaitMs, "1s", "invalid_header", ""},
		{"budget blank", headers.StargateMaxWaitMs, "", "invalid_header", ""},
		{"budget above u64", headers.StargateMaxWaitMs, "18446744073709551616", "invalid_header", ""},
		{"budget deadline overflows", headers.StargateMaxWaitMs, strconv.FormatUint(math.MaxUint64, 10), "invalid_header", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := validHeaders()
			if tc.value == "<del>" {
				hdr.Del(tc.header)
			} else {
				hdr[http.CanonicalHeaderKey(tc.header)] = []string{tc.value}
			}
			w := serveLocal(h.p, http.MethodPost, hdr, chatBody)
			if w.Code != http.StatusBadRequest {
				t.Fatalf("status %d, want 400; body %s", w.Code, w.Body)
			}
			e := decodeError(t, w)
			if e.Param != tc.header || e.Code != tc.code {
				t.Errorf("error %+v, want param %s code %s", e, tc.header, tc.code)
			}
			if tc.code == "invalid_header" && !strings.Contains(e.Message, tc.header) {
				t.Errorf("message %q does not name %s", e.Message, tc.header)
			}
		})
	}
	if n := len(h.hits()); n != 0 {
		t.Errorf("a backend was called for a rejected request: %v", h.hits())
	}
}

// Values that look odd but are valid go through: trimmed numbers, leading
// zeros, every power-of-n alias in any case and with _ for -, optional
// headers left out, and a retry budget longer than a day.
func TestHeaderParsingAccepts(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, tc := range []struct{ name, header, value string }{
		{"tokens trimmed", headers.InputTokens, " \t100\t "},
		{"tokens leading zeros", headers.InputTokens, "000100"},
		{"tokens zero", headers.InputTokens, "0"},
		{"tokens max", headers.InputTokens, "4294967295"},
		{"method power-of-n", headers.RoutingMethod, "power-of-n"},
		{"method alias upper", headers.RoutingMethod, " POWER_OF_TWO "},
		{"method alias powerof2", headers.RoutingMethod, "PowerOf2"},
		{"method alias powerofn", headers.RoutingMethod, "powerofn"},
		{"priority max", headers.Priority, "4294967295"},
		{"max wait huge (capped)", headers.MaxWaitMs, "18446744073709551615"},
		{"slo", headers.RequestSLOMs, "1500"},
		{"affinity blank is absent", headers.CacheAffinityKey, "  "},
		{"budget two days", headers.StargateMaxWaitMs, "172800000"},
		{"budget trimmed", headers.StargateMaxWaitMs, " 5000 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := validHeaders()
			hdr[http.CanonicalHeaderKey(tc.header)] = []string{tc.value}
			resp, body := h.do(hdr, chatBody)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200; body %s", resp.StatusCode, body)
			}
		})
	}
}

// A resolved route that requires an affinity key rejects a request without
// one (parse order step 9), after the numeric headers.
func TestRequireAffinityKey(t *testing.T) {
	t.Parallel()
	picker, err := powerofn.New(powerofn.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: "power-of-n", Picker: picker, RequireAffinityKey: true}})
	for _, tc := range []struct {
		name     string
		mutate   func(http.Header)
		status   int
		param    string
		wantCode string
	}{
		{"absent", func(http.Header) {}, http.StatusBadRequest, headers.CacheAffinityKey, "missing_header"},
		{"blank", func(h http.Header) { h.Set(headers.CacheAffinityKey, " ") }, http.StatusBadRequest, headers.CacheAffinityKey, "missing_header"},
		{"bad priority first", func(h http.Header) { h.Set(headers.Priority, "x") }, http.StatusBadRequest, headers.Priority, "invalid_header"},
		{"present", func(h http.Header) { h.Set(headers.CacheAffinityKey, "mt:v1:session:abc") }, http.StatusOK, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hdr := validHeaders()
			tc.mutate(hdr)
			w := serveLocal(h.p, http.MethodPost, hdr, chatBody)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d; body %s", w.Code, tc.status, w.Body)
			}
			if tc.status == http.StatusOK {
				return
			}
			if e := decodeError(t, w); e.Param != tc.param || e.Code != tc.wantCode {
				t.Errorf("error %+v, want param %s code %s", e, tc.param, tc.wantCode)
			}
		})
	}
}

func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		for _, path := range []string{"/v1/chat/completions", "/v1/responses", "/v1/embeddings", "/v1/completions"} {
			req, err := http.NewRequest(m, h.srv.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = validHeaders()
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
				t.Errorf("%s %s: status %d Allow %q", m, path, resp.StatusCode, resp.Header.Get("Allow"))
			}
			if e := openAIError(t, resp, body); e.Code != "method_not_allowed" {
				t.Errorf("%s %s: error %+v", m, path, e)
			}
		}
	}
	if n := len(h.hits()); n != 0 {
		t.Errorf("backend called: %v", h.hits())
	}
}

// Content-Length over --proxy-max-replay-body-bytes is a 413 before any
// routing (step 11); a chunked body that grows past the limit is too; a
// body of exactly the limit is forwarded byte for byte.
func TestReplayBodyLimit(t *testing.T) {
	t.Parallel()
	const limit = 64
	h := newHarness(t, nil, func(c *Config) { c.MaxReplayBodyBytes = limit })

	resp, body := h.do(validHeaders(), strings.Repeat("x", limit+1))
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("Content-Length over the limit: status %d, want 413", resp.StatusCode)
	}
	if e := openAIError(t, resp, body); e.Code != "request_too_large" {
		t.Errorf("error %+v", e)
	}

	// A chunked upload has no Content-Length: the limit applies while reading.
	req, err := http.NewRequest(http.MethodPost, h.srv.URL+"/v1/chat/completions", struct{ *strings.Reader }{strings.NewReader(strings.Repeat("y", limit+1))})
	if err != nil {
		t.Fatal(err)
	}
	req.Header = validHeaders()
	resp, err = h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if req.ContentLength != 0 && req.ContentLength != -1 {
		t.Fatalf("test bug: request has Content-Length %d", req.ContentLength)
	}
	_ = readAll(t, resp)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the limit: status %d, want 413", resp.StatusCode)
	}
	h.inflight.Wait()
	if n := len(h.hits()); n != 0 {
		t.Fatalf("backend called for an oversized body: %v", h.hits())
	}

	exact := strings.Repeat("z", limit)
	resp, _ = h.do(validHeaders(), exact)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("body at the limit: status %d", resp.StatusCode)
	}
	if got := h.backends["a1"].requests(); len(got) != 1 || got[0].Body != exact {
		t.Fatalf("backend received %+v", got)
	}
}

// A body of declared length is read into a buffer of exactly that length,
// and one that ends before its declared length is a 400, as any body that
// fails to read.
func TestReadDeclaredBody(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	body, oerr := readDeclared(r)
	if oerr != nil || string(body) != chatBody || cap(body) != len(chatBody) {
		t.Fatalf("readDeclared = %q (cap %d), %v; want the body in a buffer of its length", body, cap(body), oerr)
	}
	short := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	short.ContentLength = int64(len(chatBody)) + 10
	if _, oerr := readDeclared(short); oerr == nil || oerr.Status != http.StatusBadRequest || oerr.Code != "body_read_error" {
		t.Fatalf("a body shorter than declared: %+v, want a 400 body_read_error", oerr)
	}
	chunked := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	chunked.ContentLength = -1
	if body, oerr := readDeclared(chunked); body != nil || oerr != nil {
		t.Fatalf("undeclared length: %q, %v; want nil, nil (read by openai.ReadBody)", body, oerr)
	}
}

// fixedResolver always resolves to route.
type fixedResolver struct{ route lb.Route }

func (r fixedResolver) Resolve(routing.Target, string) (lb.Route, *lb.Rejection) { return r.route, nil }

func (fixedResolver) KnownMethod(method string) bool { return PowerOfNResolver{}.KnownMethod(method) }

// fuzzHeaders are the headers FuzzParseHeaders sets, in parse order.
var fuzzHeaders = []string{
	headers.RequestID, headers.InputTokens, headers.Model, headers.RoutingKey, headers.RoutingMethod,
	headers.Priority, headers.MaxWaitMs, headers.RequestSLOMs, headers.CacheAffinityKey, headers.StargateMaxWaitMs,
}

// FuzzParseHeaders sends arbitrary values of the routing headers to a
// proxy with nothing registered. It must never panic, and must answer
// either a 400 naming the first header the parse order rejects (computed
// here independently of the code) or, when every header is acceptable, the
// 404 of an unknown target. For an accepted set, the parsed request must
// hold exactly what a strconv-based reading of the headers gives, within
// each header's documented bound (checkParsed).
func FuzzParseHeaders(f *testing.F) {
	f.Add(uint16(0xffff), "req-1", "100", "m", "rk", "power-of-n", "0", "250", "1500", "mt:v1:s:x", "1000")
	f.Add(uint16(0x0007), "req-1", "100", "m", "", "", "", "", "", "", "")
	f.Add(uint16(0xffff), " r ", " 007\t", "m", " ", "POWER_OF_TWO", "4294967295", "18446744073709551615", "0", "", "0")
	f.Add(uint16(0xffff), "r", "1", "m", "k", "random", "4294967296", "x", "y", "", "z")
	f.Add(uint16(0xffff), "r", "", "m", "k", "bogus", "", "", "", "", "")
	f.Add(uint16(0xffff), "r\x00", "1", "\u00e9", "k", "\x7f", "1", "1", "1", "\x01", "18446744073709551615")
	f.Add(uint16(0x0003), "r", "+1", "m", "k", "", "", "", "", "", "")
	store := state.New(clock.Real{})
	picker, err := powerofn.New(powerofn.DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	cfg := Defaults()
	cfg.Clock, cfg.Log = clock.Real{}, slog.New(slog.DiscardHandler)
	cfg.StartupGrace = 0 // nothing registers here: every model is unknown, a 404
	p := New(cfg, store, tunnels{}, PowerOfNResolver{Picker: picker})
	f.Fuzz(func(t *testing.T, present uint16, id, tok, mdl, key, method, prio, wait, slo, aff, budget string) {
		values := []string{id, tok, mdl, key, method, prio, wait, slo, aff, budget}
		hdr := http.Header{}
		for i, name := range fuzzHeaders {
			if present&(1<<i) != 0 {
				hdr[http.CanonicalHeaderKey(name)] = []string{values[i]}
			}
		}
		parsed := hdr.Clone()
		w := serveLocal(p, http.MethodPost, hdr, "{}")
		param, code := expectedRejection(hdr)
		if param == "" {
			if w.Code != http.StatusNotFound || w.Header().Get(headers.StargateErrorCode) != headers.ErrorCodeNoEligibleCandidates {
				t.Fatalf("headers %q: status %d, want the 404 of an unknown target; body %s", hdr, w.Code, w.Body)
			}
			checkParsed(t, p, parsed)
			return
		}
		if w.Code != http.StatusBadRequest {
			t.Fatalf("headers %q: status %d, want 400 for %s; body %s", hdr, w.Code, param, w.Body)
		}
		var env struct{ Error openai.Error }
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Fatalf("body %q: %v", w.Body, err)
		}
		if env.Error.Param != param || env.Error.Code != code {
			t.Fatalf("headers %q: error %+v, want param %s code %s", hdr, env.Error, param, code)
		}
	})
}

// maxBudgetMs is the largest retry budget whose deadline a time.Duration
// can hold.
const maxBudgetMs = math.MaxInt64 / 1_000_000

// expectedRejection restates docs/design/hub-request.md#parse-order for
// FuzzParseHeaders: the header
// and error code of the first failing step, or "" when all pass.
func expectedRejection(h http.Header) (param, code string) {
	get := func(name string) (string, bool) {
		vs := h[http.CanonicalHeaderKey(name)]
		if len(vs) == 0 {
			return "", false
		}
		return vs[0], true
	}
	text := func(name string) (string, bool) { // visible ASCII (and tab), trimmed, non-blank
		v, ok := get(name)
		if !ok {
			return "", false
		}
		for _, c := range []byte(v) {
			if c != '\t' && (c < 0x20 || c > 0x7e) {
				return "", false
			}
		}
		v = strings.Trim(v, " \t")
		return v, v != ""
	}
	number := func(name string, bits int) (uint64, bool, bool) { // value, present, valid
		v, ok := get(name)
		if !ok {
			return 0, false, true
		}
		n, err := strconv.ParseUint(strings.Trim(v, " \t"), 10, bits)
		return n, true, err == nil
	}
	if _, ok := text(headers.RequestID); !ok {
		return headers.RequestID, "missing_header"
	}
	if n, present, valid := number(headers.InputTokens, 64); !present {
		return headers.InputTokens, "missing_header"
	} else if !valid || n > 4294967295 {
		return headers.InputTokens, "invalid_header"
	}
	if _, ok := text(headers.Model); !ok {
		return headers.Model, "missing_header"
	}
	canonical := ""
	if _, present := get(headers.RoutingMethod); present {
		v, ok := text(headers.RoutingMethod)
		if !ok {
			return headers.RoutingMethod, "invalid_routing_method"
		}
		method, _, expression := strings.Cut(v, ";")
		switch strings.ReplaceAll(strings.ToLower(strings.TrimSpace(method)), "_", "-") {
		case "power-of-n", "power-of-two", "powerof2", "powerofn":
			canonical = "power-of-n"
		case "wait-and-widen", "groq-multiregion", "round-robin", "random", "pulsar", "pulsar-wait-and-widen", "pulsar-multiregion":
			canonical = "other"
		default:
			return headers.RoutingMethod, "unknown_method"
		}
		if expression {
			// The power-of-n resolver of this harness has no expressions.
			canonical = "other"
		}
	}
	for _, n := range []struct {
		name string
		bits int
	}{{headers.Priority, 32}, {headers.MaxWaitMs, 64}, {headers.RequestSLOMs, 64}} {
		if _, _, valid := number(n.name, n.bits); !valid {
			return n.name, "invalid_header"
		}
	}
	if canonical == "other" {
		return headers.RoutingMethod, "unavailable"
	}
	if b, present, valid := number(headers.StargateMaxWaitMs, 64); !valid || (present && b > maxBudgetMs) {
		return headers.StargateMaxWaitMs, "invalid_header"
	}
	return "", ""
}

// checkParsed parses hdr, which expectedRejection accepts, and checks
// every numeric field of the result against an independent reading of the
// headers with strconv and against its documented bound
// (docs/hub.md#request-contract): x-input-tokens at most 2^32-1 and
// exact; x-priority exact; x-max-wait-ms clamped to the 60 s routing wait,
// with the untimed-wait deadline only when the header was sent; every wait
// deadline at most 60 s after the start; x-request-slo-ms exact or
// saturated at the largest Duration; the retry budget exact, 0 meaning no
// retries.
func checkParsed(t *testing.T, p *Proxy, hdr http.Header) {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
	r.Header = hdr
	req, oerr := p.parse(r, p.gen.Load())
	if oerr != nil {
		t.Fatalf("headers %q: parse refused what the oracle accepts: %+v", hdr, oerr)
	}
	ms := func(name string) (uint64, bool) {
		vs := hdr[http.CanonicalHeaderKey(name)]
		if len(vs) == 0 {
			return 0, false
		}
		n, err := strconv.ParseUint(strings.Trim(vs[0], " \t"), 10, 64)
		if err != nil {
			t.Fatalf("the oracle accepted %s %q: %v", name, vs[0], err)
		}
		return n, true
	}
	dur := func(n uint64) time.Duration { // saturating, computed without MillisDuration
		if n > math.MaxInt64/uint64(time.Millisecond) {
			return math.MaxInt64
		}
		return time.Duration(n) * time.Millisecond
	}
	rr, limit := &req.pass.Req, p.cfg.MaxRoutingWait
	tok, _ := ms(headers.InputTokens)
	if rr.InputTokens != tok || rr.InputTokens > MaxInputTokens {
		t.Errorf("headers %q: input tokens %d, want %d within %d", hdr, rr.InputTokens, tok, uint64(MaxInputTokens))
	}
	prio, _ := ms(headers.Priority)
	if uint64(rr.Priority) != prio {
		t.Errorf("headers %q: priority %d, want %d", hdr, rr.Priority, prio)
	}
	wait, hasWait := ms(headers.MaxWaitMs)
	if want := min(dur(wait), limit); rr.MaxWait != want || rr.MaxWait > limit {
		t.Errorf("headers %q: max wait %v, want %v", hdr, rr.MaxWait, want)
	}
	if got := req.pass.WaitUntil.Sub(req.start); got < 0 || got > limit {
		t.Errorf("headers %q: wait deadline %v after the start, beyond %v", hdr, got, limit)
	}
	if req.pass.RepollUntil.IsZero() == hasWait ||
		(hasWait && !req.pass.RepollUntil.Equal(req.start.Add(min(dur(wait), limit)))) {
		t.Errorf("headers %q: re-poll deadline %v (start %v)", hdr, req.pass.RepollUntil, req.start)
	}
	slo, _ := ms(headers.RequestSLOMs)
	if rr.SLO != dur(slo) || rr.SLO < 0 {
		t.Errorf("headers %q: SLO %v, want %v", hdr, rr.SLO, dur(slo))
	}
	budget, hasBudget := ms(headers.StargateMaxWaitMs)
	switch {
	case !hasBudget && (!req.budgetUntil.IsZero() || req.noRetries):
		t.Errorf("headers %q: a budget without the header", hdr)
	case hasBudget && (req.budgetUntil.Sub(req.start) != dur(budget) || req.noRetries != (budget == 0)):
		t.Errorf("headers %q: budget %v (no retries %v), want %v", hdr, req.budgetUntil.Sub(req.start), req.noRetries, dur(budget))
	}
}
