package mockengine

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/openai"
)

// faultMode is what an injected fault does to an inference request
// (docs/mock-engine.md#fault-injection). The modes are the ways a real
// engine fails that the tiers above it must survive: it answers with an
// error, it stops answering, or it dies mid-answer.
type faultMode string

const (
	faultNone faultMode = "none"
	// faultStatus answers at once with a 5xx OpenAI error.
	faultStatus faultMode = "status"
	// faultHang accepts the request and never sends a response head; the
	// handler waits until the client goes away.
	faultHang faultMode = "hang"
	// faultDrop serves the request normally and drops the connection
	// after a number of streamed tokens, before the stream's last event.
	faultDrop faultMode = "drop"
)

// faultSpec is the engine-wide fault set through PUT /test-control/fault.
// Fields that do not apply to the mode are refused, so a typo in a test
// cannot leave a fault silently different from the one meant.
type faultSpec struct {
	Mode faultMode `json:"mode"`
	// Status is the answer of mode status, 500 to 599 (default 500).
	Status int `json:"status,omitempty"`
	// Retryable adds x-stargate-upstream-retryable: true to a status
	// answer, as an engine that asks the pylon to retry elsewhere does.
	Retryable bool `json:"retryable,omitempty"`
	// AfterTokens is how many output tokens mode drop streams before it
	// drops the connection; at or beyond the output length the drop
	// comes after the last token, before the finish event.
	AfterTokens int `json:"after_tokens,omitempty"`
	// Fraction is the share of requests the fault hits, in (0, 1]
	// (default 1). The choice is deterministic: of the first n requests
	// after the fault is set, exactly floor(n x Fraction) are hit, so a
	// test can assert counts.
	Fraction float64 `json:"fraction,omitempty"`
}

// validate fills the defaults and checks every field against the mode.
func (f *faultSpec) validate() *openai.Error {
	switch f.Mode {
	case faultNone, faultStatus, faultHang, faultDrop:
	case "":
		return openai.BadRequest("mode", "missing_field", `field "mode" is required: none, status, hang or drop`)
	default:
		return openai.BadRequest("mode", "invalid_value", "mode %q is not one of none, status, hang, drop", f.Mode)
	}
	if f.Mode != faultStatus && (f.Status != 0 || f.Retryable) {
		return openai.BadRequest("status", "invalid_value", "status and retryable apply to mode status only")
	}
	if f.Mode != faultDrop && f.AfterTokens != 0 {
		return openai.BadRequest("after_tokens", "invalid_value", "after_tokens applies to mode drop only")
	}
	if f.Mode == faultNone && f.Fraction != 0 {
		return openai.BadRequest("fraction", "invalid_value", "fraction does not apply to mode none")
	}
	if f.Mode == faultStatus && f.Status == 0 {
		f.Status = http.StatusInternalServerError
	}
	if f.Status != 0 && (f.Status < 500 || f.Status > 599) {
		return openai.BadRequest("status", "invalid_value", "status must be 500 to 599, got %d", f.Status)
	}
	if f.AfterTokens < 0 || f.AfterTokens > maxOutputTokens {
		return openai.BadRequest("after_tokens", "invalid_value", "after_tokens must be 0 to %d, got %d", maxOutputTokens, f.AfterTokens)
	}
	if f.Mode != faultNone && f.Fraction == 0 {
		f.Fraction = 1
	}
	if math.IsNaN(f.Fraction) || f.Fraction < 0 || f.Fraction > 1 {
		return openai.BadRequest("fraction", "invalid_value", "fraction must be in (0, 1], got %v", f.Fraction)
	}
	return nil
}

// hits reports whether the k-th request (from 1) since the fault was set
// is hit: the integer part of k x fraction grows at that request, which
// spreads the hits evenly and makes their count exact.
func (f *faultSpec) hits(k uint64) bool {
	return math.Floor(float64(k)*f.Fraction) > math.Floor(float64(k-1)*f.Fraction)
}

// statsPoison is what the engine reports to the pylon instead of its true
// statistics (PUT /test-control/stats): values a buggy or hostile engine
// may send, which the pylon and the hub must not turn into routing
// decisions.
type statsPoison string

const (
	poisonNone statsPoison = "none"
	// poisonNaN writes the literal NaN (not valid JSON, but what Python's
	// json module emits for a float NaN) in every number.
	poisonNaN statsPoison = "nan"
	// poisonNegative writes each count negated (-1 for 0).
	poisonNegative statsPoison = "negative"
	// poisonHuge writes the largest uint64 in every count.
	poisonHuge statsPoison = "huge"
	// poisonStale stops the stats stream's events (pings go on) and
	// freezes /kv-cache/stats at its values of the moment it was set.
	poisonStale statsPoison = "stale"
)

func (p statsPoison) valid() bool {
	switch p {
	case poisonNone, poisonNaN, poisonNegative, poisonHuge, poisonStale:
		return true
	}
	return false
}

// poisonNumber renders n as the poison says; poisonNone and poisonStale
// keep it.
func poisonNumber(p statsPoison, n uint64) string {
	switch p {
	case poisonNaN:
		return "NaN"
	case poisonNegative:
		return "-" + strconv.FormatUint(max(n, 1), 10)
	case poisonHuge:
		return strconv.FormatUint(math.MaxUint64, 10)
	}
	return strconv.FormatUint(n, 10)
}

// injectBeforeRun applies a status or hang fault before the request takes
// a running slot and reports whether the request is finished. A hang ends
// when the client leaves, or, when the engine shuts down, by dropping the
// connection: a hung engine must never look like it answered.
func (e *Engine) injectBeforeRun(w http.ResponseWriter, r *http.Request, f faultSpec) bool {
	switch f.Mode {
	case faultStatus:
		e.control.injected(faultStatus)
		if f.Retryable {
			w.Header().Set(headers.StargateUpstreamRetryable, "true")
		}
		openai.WriteError(w, &openai.Error{Status: f.Status, Type: openai.TypeServer, Code: "injected_fault",
			Message: fmt.Sprintf("mock engine fault injection: status %d", f.Status)})
		return true
	case faultHang:
		e.control.injected(faultHang)
		select {
		case <-r.Context().Done():
			return true
		case <-e.done:
			panic(http.ErrAbortHandler)
		}
	}
	return false
}

// serveControlFault sets the engine-wide fault: PUT /test-control/fault.
func (e *Engine) serveControlFault(w http.ResponseWriter, r *http.Request) {
	var f faultSpec
	if oerr := decodeControl(w, r, &f); oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	if oerr := f.validate(); oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	e.control.setFault(f)
	writeJSON(w, http.StatusOK, e.control.snapshot())
}

// serveControlStats sets the statistics poison: PUT /test-control/stats.
func (e *Engine) serveControlStats(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Poison statsPoison `json:"poison"`
	}
	if oerr := decodeControl(w, r, &req); oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	if !req.Poison.valid() {
		openai.WriteError(w, openai.BadRequest("poison", "invalid_value", "poison %q is not one of none, nan, negative, huge, stale", req.Poison))
		return
	}
	var frozen []byte
	if req.Poison == poisonStale {
		frozen = e.kvStatsBody(poisonNone)
	}
	e.control.setPoison(req.Poison, frozen)
	writeJSON(w, http.StatusOK, e.control.snapshot())
}

// decodeControl reads a small test-control body into v, refusing unknown
// fields: a misspelt knob must fail the test that sent it, not be ignored.
func decodeControl(w http.ResponseWriter, r *http.Request, v any) *openai.Error {
	body, oerr := openai.ReadBody(w, r, 1<<16)
	if oerr != nil {
		return oerr
	}
	if oerr := openai.DecodeJSON(body, v); oerr != nil {
		return oerr
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return openai.BadRequest("", "unknown_field", "%v", err)
	}
	return nil
}
