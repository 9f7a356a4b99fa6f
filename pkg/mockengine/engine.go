package mockengine

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine/kvcache"
	"github.com/stargate-router/stargate/pkg/mockengine/prefill"
	"github.com/stargate-router/stargate/pkg/openai"
)

// Engine is one mock engine instance: its own cache, prefill capacity,
// running slots and counters.
type Engine struct {
	cfg      Config
	clock    clock.Clock
	log      *slog.Logger
	kv       *kvcache.Cache
	prefill  *prefill.Scheduler
	slots    *slots
	stats    *broadcaster
	control  *testControl
	metrics  *metrics
	idSeq    atomic.Uint64
	done     chan struct{}
	doneOnce sync.Once
}

// New builds an engine from a validated config. Metrics go to reg.
func New(cfg Config, clk clock.Clock, reg prometheus.Registerer, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	kv, err := kvcache.New(cfg.kvConfig())
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:     cfg,
		clock:   clk,
		log:     log,
		kv:      kv,
		prefill: prefill.New(clk),
		slots:   newSlots(cfg.MaxConcurrent, cfg.MaxWaiting),
		stats:   newBroadcaster(),
		control: newTestControl(cfg.ModelName),
		done:    make(chan struct{}),
	}
	e.stats.poison = func() statsPoison { p, _ := e.control.statsPoison(); return p }
	e.metrics = newMetrics(reg, e)
	return e, nil
}

// Close ends the never-ending stats streams so a server drain can finish.
// Generation requests in flight run to completion.
func (e *Engine) Close() {
	e.doneOnce.Do(func() { close(e.done) })
}

// Handler returns the engine's HTTP routes. Unknown paths and wrong methods
// get OpenAI-shaped errors.
func (e *Engine) Handler(metricsHandler http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/chat/completions", only(http.MethodPost, http.HandlerFunc(e.serveChat)))
	mux.Handle("/v1/completions", only(http.MethodPost, http.HandlerFunc(e.serveCompletion)))
	mux.Handle("/v1/responses", only(http.MethodPost, http.HandlerFunc(e.serveResponses)))
	mux.Handle("/v1/embeddings", only(http.MethodPost, http.HandlerFunc(e.serveEmbeddings)))
	mux.Handle("/v1/models", only(http.MethodGet, http.HandlerFunc(e.serveModels)))
	mux.Handle("/health", only(http.MethodGet, http.HandlerFunc(e.serveHealth)))
	mux.Handle("/pylon/v1/stats/stream", only(http.MethodGet, http.HandlerFunc(e.serveStatsStream)))
	mux.Handle("/kv-cache/stats", only(http.MethodGet, http.HandlerFunc(e.serveKVStats)))
	mux.Handle("/test-control", only(http.MethodGet, http.HandlerFunc(e.serveControlSnapshot)))
	mux.Handle("/test-control/models/{model}", only(http.MethodPut, http.HandlerFunc(e.serveControlModel)))
	mux.Handle("/test-control/discovery-models", only(http.MethodPut, http.HandlerFunc(e.serveControlDiscovery)))
	mux.Handle("/test-control/kv-cache/reset", only(http.MethodPost, http.HandlerFunc(e.serveControlReset)))
	mux.Handle("/test-control/fault", only(http.MethodPut, http.HandlerFunc(e.serveControlFault)))
	mux.Handle("/test-control/stats", only(http.MethodPut, http.HandlerFunc(e.serveControlStats)))
	if metricsHandler != nil {
		mux.Handle("/metrics", only(http.MethodGet, metricsHandler))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		openai.WriteError(w, openai.NotFound("no route for %s %s", r.Method, r.URL.Path))
	})
	return mux
}

func only(method string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			openai.WriteError(w, openai.MethodNotAllowed(r.Method, method))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (e *Engine) serveChat(w http.ResponseWriter, r *http.Request) {
	e.serveGeneration(w, r, "chat_completions", parseChat)
}

func (e *Engine) serveCompletion(w http.ResponseWriter, r *http.Request) {
	e.serveGeneration(w, r, "completions", parseCompletion)
}

func (e *Engine) serveResponses(w http.ResponseWriter, r *http.Request) {
	e.serveGeneration(w, r, "responses", parseResponses)
}

// serveGeneration runs one generating request through admission, prefix
// cache, shared prefill and decode, in the order of
// docs/mock-engine.md#the-model: prefill finishes before response headers
// go out (so pylon counts a prefilling request as queued), then the base
// TTFT, then one token per token delay.
func (e *Engine) serveGeneration(w http.ResponseWriter, r *http.Request, endpoint string, parse func([]byte) (*generation, *openai.Error)) {
	arrived := e.clock.Now()
	body, oerr := openai.ReadBody(w, r, e.cfg.MaxBodyBytes)
	if oerr != nil {
		e.reject(w, oerr, "too_large")
		return
	}
	g, oerr := parse(body)
	if oerr != nil {
		e.reject(w, oerr, "bad_request")
		return
	}
	requestID, ok := e.identify(r, endpoint, g.kind, g.model)
	if !ok {
		return
	}
	fault := e.control.nextFault()
	if e.injectBeforeRun(w, r, fault) {
		return
	}
	ctx := r.Context()
	if g.kind == "chat" && e.control.model(g.model).ChatFailure {
		e.reject(w, openai.Unavailable("chat_failure", fmt.Sprintf("mock chat failure enabled for model %s", g.model)), "chat_failure")
		return
	}

	outTokens, finish, oerr := e.outputLength(r, g)
	if oerr != nil {
		e.reject(w, oerr, "bad_request")
		return
	}
	// Hash before taking a slot: it is the request's own CPU work, not the
	// engine's.
	seq := e.kv.NewSequence(g.prompt)
	promptTokens := seq.Tokens()

	if !e.acquire(w, r) {
		return
	}
	defer e.slots.release()
	admitted := e.clock.Now()
	e.metrics.queueTime.Observe(admitted.Sub(arrived).Seconds())

	if g.stream {
		e.stats.stats(requestID, g.model, 0, 0, false)
	}
	lease := e.kv.Lookup(seq)
	cached := lease.CachedTokens()
	e.metrics.promptTokens.Add(float64(promptTokens))
	e.metrics.prefixQueries.Add(float64(promptTokens))
	e.metrics.prefixHits.Add(float64(cached))

	work := e.cfg.scale(e.cfg.prefillWork(promptTokens-cached, cached))
	if err := e.prefill.Do(ctx, work); err != nil {
		lease.Release(nil)
		e.metrics.success.WithLabelValues("abort").Inc()
		return
	}
	e.metrics.prefillTime.Observe(e.clock.Since(admitted).Seconds())
	ev := lease.Commit()

	h := w.Header()
	h.Set(headers.RequestID, requestID)
	h.Set(headers.KVCacheHit, strconv.FormatBool(cached > 0))
	h.Set(headers.KVCacheHitTokens, strconv.Itoa(cached))
	h.Set(headers.KVCacheReusedInputTokens, strconv.Itoa(cached))
	h.Set(headers.KVCacheUncachedInputTokens, strconv.Itoa(promptTokens-cached))
	h.Set(headers.KVCacheEvictedEntries, strconv.Itoa(ev.Blocks))
	h.Set(headers.KVCacheEvictedTokens, strconv.FormatInt(ev.Tokens, 10))
	if e.cfg.EngineID != "" {
		h.Set(headers.MockEngineID, e.cfg.EngineID)
	}
	if e.cfg.ClusterID != "" {
		h.Set(headers.MockClusterID, e.cfg.ClusterID)
	}

	run := &run{
		e: e, g: g, w: w, ctx: ctx, requestID: requestID, arrived: arrived,
		promptTokens: promptTokens, cachedTokens: cached,
		tokens: outputTokens(e.cfg.Seed, requestID, outTokens), finish: finish,
		drop: fault.Mode == faultDrop, dropAfter: fault.AfterTokens,
	}
	var generated int
	if g.stream {
		generated = run.stream()
	} else {
		generated = run.complete()
	}
	lease.Release(g.replyBytes(joinTokens(run.tokens[:generated])))
	e.metrics.generationTokens.Add(float64(generated))
	if generated == outTokens && !run.dropped {
		e.metrics.success.WithLabelValues(finish).Inc()
		e.metrics.e2e.Observe(e.clock.Since(arrived).Seconds())
	} else {
		e.metrics.success.WithLabelValues("abort").Inc()
	}
	if run.dropped {
		// The cache and the slot are released like any aborted request's;
		// then net/http closes the connection without ending the body (an
		// HTTP/1.1 chunked body never gets its last chunk, an HTTP/2
		// stream is reset), as when an engine process dies mid-answer.
		e.control.injected(faultDrop)
		panic(http.ErrAbortHandler)
	}
}

// maxOutputTokens bounds x-output-tokens so a bad header cannot make one
// request generate for hours.
const maxOutputTokens = 1 << 20

// identify names the request (x-request-id, else a generated id), counts it
// for test control and holds pylon-generated traffic while its model's
// bringup is blocked; false means the client left while held.
func (e *Engine) identify(r *http.Request, endpoint, kind, model string) (string, bool) {
	requestID := r.Header.Get(headers.RequestID)
	if requestID == "" {
		requestID = e.newID(kind)
	}
	class := requestClass(requestID)
	e.control.count(endpoint, model, class)
	if class == classPylon && !e.control.waitBringup(r.Context(), model) {
		return "", false
	}
	return requestID, true
}

// acquire takes a running slot, answering 429 itself when the waiting room
// is full; false means no slot (refused, or the client left while waiting).
func (e *Engine) acquire(w http.ResponseWriter, r *http.Request) bool {
	if err := e.slots.acquire(r.Context()); err != nil {
		if errors.Is(err, errQueueFull) {
			e.reject(w, openai.RateLimited("rate_limit_exceeded", "engine is at its concurrency limit and its waiting queue is full; retry later", 1), "queue_full")
		}
		return false
	}
	return true
}

// outputLength is x-output-tokens when present, so the load generator
// controls reply sizes exactly whatever the body says, else max_tokens
// capped by --num-tokens, as upstream Stargate's mock engine does. The
// finish reason is "length" when the
// client's max_tokens is what stopped generation, as on a real engine.
func (e *Engine) outputLength(r *http.Request, g *generation) (int, string, *openai.Error) {
	n, present, err := headers.GetUint64(r.Header, headers.OutputTokens)
	if err != nil {
		return 0, "", openai.BadRequest("", "invalid_header", "%v", err)
	}
	if present {
		return int(max(min(n, maxOutputTokens), 1)), "stop", nil
	}
	if g.maxTokens != nil && *g.maxTokens <= e.cfg.NumTokens {
		return *g.maxTokens, "length", nil
	}
	return e.cfg.NumTokens, "stop", nil
}

func (e *Engine) reject(w http.ResponseWriter, oerr *openai.Error, reason string) {
	e.metrics.rejected.WithLabelValues(reason).Inc()
	openai.WriteError(w, oerr)
}

// newID makes a response id that is unique in the process and reproducible
// for a seed.
func (e *Engine) newID(kind string) string {
	prefix := "chatcmpl-mock-"
	switch kind {
	case "completion":
		prefix = "cmpl-mock-"
	case "responses":
		prefix = "resp-mock-"
	case "embedding":
		prefix = "embd-mock-"
	}
	return prefix + strconv.FormatUint(e.cfg.Seed, 16) + "-" + strconv.FormatUint(e.idSeq.Add(1), 16)
}

// usage is the OpenAI usage object, with the cached prompt tokens.
type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func newUsage(prompt, cached, completion int) *usage {
	u := &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.PromptTokensDetails.CachedTokens = cached
	return u
}

func (e *Engine) serveModels(w http.ResponseWriter, r *http.Request) {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	ids := e.control.discover()
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: make([]model, 0, len(ids))}
	for _, id := range ids {
		out.Data = append(out.Data, model{ID: id, Object: "model", OwnedBy: "mock-engine"})
	}
	writeJSON(w, http.StatusOK, out)
}

func (e *Engine) serveHealth(w http.ResponseWriter, r *http.Request) {
	if d := e.cfg.scale(e.cfg.HealthDelay); d > 0 && !clock.Sleep(e.clock, r.Context().Done(), d) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}

func (e *Engine) serveKVStats(w http.ResponseWriter, r *http.Request) {
	poison, frozen := e.control.kvRead()
	body := frozen
	if poison != poisonStale {
		body = e.kvStatsBody(poison)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// kvStatsBody is the /kv-cache/stats JSON with every count rendered as
// poison says. It is written by hand because a poisoned body (NaN, a
// negative count) is not something encoding/json produces.
func (e *Engine) kvStatsBody(poison statsPoison) []byte {
	st := e.kv.Stats()
	model, _ := json.Marshal(e.cfg.ModelName)
	b := append([]byte(`{"model":`), model...)
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"kv_cache_capacity_tokens", st.CapacityTokens},
		{"kv_cache_used_tokens", st.UsedTokens},
		{"kv_cache_free_tokens", max(st.CapacityTokens-st.UsedTokens, 0)},
		{"kv_cache_entries", st.Blocks},
		{"kv_cache_hit_count", st.HitCount},
		{"kv_cache_miss_count", st.MissCount},
		{"kv_cache_eviction_count", st.EvictedBlocks},
		{"kv_cache_evicted_tokens", st.EvictedTokens},
		{"kv_cache_query_tokens", st.QueryTokens},
		{"kv_cache_hit_tokens", st.HitTokens},
		{"kv_cache_block_tokens", int64(e.cfg.BlockTokens)},
	} {
		b = append(b, `,"`...)
		b = append(b, f.name...)
		b = append(b, `":`...)
		b = append(b, poisonNumber(poison, uint64(max(f.v, 0)))...)
	}
	return append(b, "}\n"...)
}

// statsPingInterval is the keep-alive cadence on the stats stream, one
// second as upstream Stargate's mock engine sends it; it is wall time and
// not scaled, since it exists for the reader.
const statsPingInterval = time.Second

func (e *Engine) serveStatsStream(w http.ResponseWriter, r *http.Request) {
	if e.cfg.DisableStatsStream {
		openai.WriteError(w, openai.NotFound("engine stats stream disabled (--disable-stats-stream)"))
		return
	}
	sub := e.stats.subscribe()
	defer e.stats.unsubscribe(sub)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	write := func(line []byte) bool {
		if _, err := w.Write(line); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(pingLine) {
		return
	}
	tick := e.clock.NewTimer(statsPingInterval)
	defer tick.Stop()
	for {
		select {
		case line := <-sub:
			if !writeQueued(w, sub, line) || rc.Flush() != nil {
				return
			}
		case <-tick.C():
			if !write(pingLine) {
				return
			}
			tick.Reset(statsPingInterval)
		case <-r.Context().Done():
			return
		case <-e.done:
			return
		}
	}
}

// writeQueued writes line and every line already queued behind it, so
// one flush (one write on the socket, one read for the pylon) carries
// them all. Nothing waits for more: a line alone goes out alone. The
// bound flushes at least once per backlog's worth of lines however fast
// they come, so neither the reader nor the ping waits on a busy engine.
func writeQueued(w io.Writer, sub <-chan []byte, line []byte) bool {
	for n := 1; ; n++ {
		if _, err := w.Write(line); err != nil {
			return false
		}
		if n == subscriberBuffer {
			return true
		}
		select {
		case line = <-sub:
		default:
			return true
		}
	}
}

func (e *Engine) serveControlSnapshot(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, e.control.snapshot())
}

func (e *Engine) serveControlModel(w http.ResponseWriter, r *http.Request) {
	model := r.PathValue("model")
	body, oerr := openai.ReadBody(w, r, 1<<16)
	if oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	var req struct {
		ChatFailure    *bool `json:"chat_failure"`
		BringupBlocked *bool `json:"bringup_blocked"`
	}
	if oerr := openai.DecodeJSON(body, &req); oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	e.control.update(model, req.ChatFailure, req.BringupBlocked)
	writeJSON(w, http.StatusOK, e.control.snapshot())
}

func (e *Engine) serveControlDiscovery(w http.ResponseWriter, r *http.Request) {
	body, oerr := openai.ReadBody(w, r, 1<<16)
	if oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	var req struct {
		Models []string `json:"models"`
	}
	if oerr := openai.DecodeJSON(body, &req); oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	for i, m := range req.Models {
		if m == "" || len(m) != len(strings.TrimSpace(m)) {
			openai.WriteError(w, openai.BadRequest("models", "invalid_value", "models[%d] is blank or padded", i))
			return
		}
	}
	e.control.setDiscovered(req.Models)
	writeJSON(w, http.StatusOK, e.control.snapshot())
}

// serveControlReset empties the prefix cache, so benchmark arms start cold
// without restarting the process.
func (e *Engine) serveControlReset(w http.ResponseWriter, r *http.Request) {
	e.kv.Reset()
	e.serveKVStats(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		openai.WriteError(w, openai.Internal("encoding response"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
