package stats

import (
	"fmt"
	"maps"
	"testing"
	"time"
)

const model = "dummy-model"

func TestEightConcurrentRequestsMoveThroughPhases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	obs := make([]*Observer, 8)
	var total uint64
	for i := range obs {
		in := uint64(100 * (i + 1))
		total += in
		obs[i] = h.c.Begin(RequestInfo{ID: fmt.Sprintf("r%d", i), Model: model, Endpoint: EndpointChat, InputTokens: in, Priority: uint32(i % 3)})
	}
	s := h.stats(model)
	if s.NumRunningQueries != 8 || s.QueueSize != 8 || s.QueuedInputSize != total || s.TotalQueryInputSize != total ||
		s.InputProcessingQueries != 0 || s.OutputGenerationQueries != 0 {
		t.Fatalf("all pending: %+v", s)
	}
	// Upstream headers for the first four: still queued, now InputProcessing.
	for _, o := range obs[:4] {
		o.Headers(200)
	}
	s = h.stats(model)
	if s.QueueSize != 8 || s.InputProcessingQueries != 4 || s.QueuedInputSize != total {
		t.Fatalf("after headers: %+v", s)
	}
	// queue_size falls as requests reach OutputGeneration.
	var generating uint64
	for i, o := range obs {
		o.Headers(200)
		o.Output([]byte(`{"choices":[{"delta":{"role":"assistant"}}]}`))
		generating += 100 * uint64(i+1)
		s = h.stats(model)
		wantQueued := uint64(7 - i)
		if s.QueueSize != wantQueued || s.OutputGenerationQueries != uint64(i+1) || s.NumRunningQueries != 8 ||
			s.QueuedInputSize != total-generating || s.InputProcessingQueries+s.OutputGenerationQueries+0 > 8 {
			t.Fatalf("after %d outputs: %+v", i+1, s)
		}
	}
	if s.QueueSize != 0 || s.QueuedInputSize != 0 || s.TotalQueryInputSize != total {
		t.Fatalf("all generating: %+v", s)
	}
	if h.metric("pylon_requests_inflight", "model="+model) != 8 ||
		h.metric("pylon_requests_state", "model="+model+",state=output_generation") != 8 ||
		h.metric("pylon_requests_state_input_tokens", "model="+model+",state=output_generation") != float64(total) {
		t.Fatal("request gauges do not match the projection")
	}
	for _, o := range obs {
		o.Finish(Complete)
	}
	s = h.stats(model)
	if s.NumRunningQueries != 0 || s.TotalQueryInputSize != 0 || s.OutputGenerationQueries != 0 {
		t.Fatalf("after finish: %+v", s)
	}
}

// priorityFixture pins the TPS at 1000 and builds:
// A prio 5, 1000 tok, Pending; B prio 2, 500 tok, Pending; C prio 5, 250 tok,
// InputProcessing (counts at prio 0); D prio 9, 3000 tok, OutputGeneration
// (no work); E prio 7, 0 tok, Pending (no work).
func priorityFixture(t *testing.T) (*harness, map[string]*Observer) {
	h := newHarness(t, Config{StreamMode: ModeOff, InitialInputTPS: 1000, PinInputTPS: true})
	h.c.AddModel(model)
	o := map[string]*Observer{}
	begin := func(id string, prio uint32, in uint64) *Observer {
		o[id] = h.c.Begin(RequestInfo{ID: id, Model: model, Endpoint: EndpointChat, InputTokens: in, Priority: prio})
		return o[id]
	}
	begin("A", 5, 1000)
	begin("B", 2, 500)
	begin("C", 5, 250).Headers(200)
	d := begin("D", 9, 3000)
	d.Headers(200)
	d.Output([]byte(`{"choices":[{"delta":{"content":"x"}}]}`))
	begin("E", 7, 0)
	return h, o
}

func TestPriorityMapHandComputed(t *testing.T) {
	t.Parallel()
	h, o := priorityFixture(t)
	s := h.stats(model)
	want := map[uint32]uint64{0: 250, 2: 750, 5: 1750}
	if !maps.Equal(s.QueueTimeEstimateMsByPriority, want) {
		t.Fatalf("map %v, want %v", s.QueueTimeEstimateMsByPriority, want)
	}
	if s.QueueSize != 4 || s.QueuedInputSize != 1750 || s.TotalQueryInputSize != 4750 || s.NumRunningQueries != 5 {
		t.Fatalf("stats %+v", s)
	}
	// B reaches InputProcessing: its work moves to priority 0.
	o["B"].Headers(200)
	want = map[uint32]uint64{0: 750, 5: 1750}
	if got := h.stats(model).QueueTimeEstimateMsByPriority; !maps.Equal(got, want) {
		t.Fatalf("map %v, want %v", got, want)
	}
	// No work left: an explicit empty map, not an absent one.
	for _, x := range o {
		x.Finish(Cancelled)
	}
	if got := h.stats(model).QueueTimeEstimateMsByPriority; got == nil || len(got) != 0 {
		t.Fatalf("no work: map %v (nil %v), want empty non-nil", got, got == nil)
	}
}

func TestPriorityMapRoundsUpAndIsAbsentWithoutTPS(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff, InitialInputTPS: 3})
	h.c.AddModel(model)
	h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 1, Priority: 4})
	if got := h.stats(model).QueueTimeEstimateMsByPriority; !maps.Equal(got, map[uint32]uint64{4: 334}) {
		t.Fatalf("map %v", got)
	}
	h2 := newHarness(t, Config{StreamMode: ModeOff})
	h2.c.AddModel(model)
	h2.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 1})
	if got := h2.stats(model).QueueTimeEstimateMsByPriority; got != nil {
		t.Fatalf("TPS invalid: map %v, want nil", got)
	}
	if _, ok := h2.c.LocalQueueMs(model, 0, nil); ok {
		t.Fatal("LocalQueueMs ok without a valid TPS")
	}
	if _, ok := h2.c.LocalQueueMs("other-model", 0, nil); ok {
		t.Fatal("LocalQueueMs ok without a generation")
	}
}

func TestLocalQueueMsExcludesSelf(t *testing.T) {
	t.Parallel()
	h, o := priorityFixture(t)
	tests := []struct {
		prio uint32
		self *Observer
		want uint64
	}{
		{5, nil, 1750},
		{5, o["A"], 750}, // A's own 1000 tokens left out
		{4, o["A"], 750}, // A is above 4 anyway
		{4, o["B"], 250}, // 250 (C at 0) + 500 (B) - 500
		{1, nil, 250},
		{0, o["C"], 0}, // C's InputProcessing work sits at 0
		{9, o["D"], 1750},
	}
	for _, tc := range tests {
		got, ok := h.c.LocalQueueMs(model, tc.prio, tc.self)
		if !ok || got != tc.want {
			t.Errorf("LocalQueueMs(p=%d, self=%v) = %d, %v; want %d", tc.prio, tc.self.Info().ID, got, ok, tc.want)
		}
	}
}

func TestFinishIsOnceNilSafeAndFollowsTheStateMachine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	var nilObs *Observer
	nilObs.Headers(200)
	nilObs.Output([]byte("x"))
	if got := nilObs.Finish(Complete); got != Complete {
		t.Fatalf("nil Finish = %v", got)
	}
	begin := func(ep Endpoint) *Observer {
		return h.c.Begin(RequestInfo{ID: "id-" + string(ep), Model: model, Endpoint: ep, InputTokens: 10})
	}
	tests := []struct {
		name string
		run  func(o *Observer)
		ep   Endpoint
		give State
		want State
	}{
		{"2xx with output", func(o *Observer) { o.Headers(200); o.Output([]byte(`{}`)) }, EndpointChat, Complete, Complete},
		{"no headers", func(o *Observer) {}, EndpointChat, Complete, Failed},
		{"non-2xx", func(o *Observer) { o.Headers(503) }, EndpointChat, Complete, Failed},
		{"non-2xx with body", func(o *Observer) { o.Headers(429); o.Output([]byte(`{}`)) }, EndpointChat, Complete, Failed},
		{"no output", func(o *Observer) { o.Headers(200) }, EndpointChat, Complete, Failed},
		{"embeddings without output", func(o *Observer) { o.Headers(200) }, EndpointEmbeddings, Complete, Complete},
		{"cancelled", func(o *Observer) { o.Headers(200) }, EndpointChat, Cancelled, Cancelled},
		{"non-terminal argument", func(o *Observer) {}, EndpointChat, OutputGeneration, Cancelled},
	}
	for _, tc := range tests {
		o := begin(tc.ep)
		tc.run(o)
		if got := o.Finish(tc.give); got != tc.want {
			t.Errorf("%s: Finish(%v) = %v, want %v", tc.name, tc.give, got, tc.want)
		}
		if got := o.Finish(Cancelled); got != tc.want || o.State() != tc.want {
			t.Errorf("%s: second Finish changed the state to %v", tc.name, got)
		}
		o.Output([]byte(`{}`)) // ignored after Finish
		o.Headers(200)
		if o.State() != tc.want {
			t.Errorf("%s: state moved after Finish", tc.name)
		}
	}
	if s := h.stats(model); s.NumRunningQueries != 0 {
		t.Fatalf("requests left in the projection: %+v", s)
	}
}

func TestPhasesOnlyMoveForward(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	h.c.AddModel(model)
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 5})
	o.Output([]byte(`{"choices":[{"delta":{"role":"assistant"}}]}`)) // output before headers
	o.Headers(200)
	if o.State() != OutputGeneration {
		t.Fatalf("state %v", o.State())
	}
	o.Output([]byte("[DONE]"))
	if got := o.Finish(Complete); got != Complete {
		t.Fatalf("Finish = %v", got)
	}
}

func TestGenerationsNeverMix(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	old := h.c.Begin(RequestInfo{ID: "r1", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	h.line(`{"v":1,"type":"stats","request_id":"r1","model":"%s","tokens_processed":0,"tokens_generated":0}`, model)
	h.c.RemoveModel(model)
	if _, ok := h.c.Stats(model); ok {
		t.Fatal("stats after RemoveModel")
	}
	if len(h.c.Models()) != 0 {
		t.Fatalf("models %v", h.c.Models())
	}
	h.c.AddModel(model)
	// Late events and observations of the retired generation change nothing.
	h.clk.Advance(time.Second)
	h.line(`{"v":1,"type":"stats","request_id":"r1","model":"%s","tokens_processed":100,"tokens_generated":0}`, model)
	old.Headers(200)
	old.Output([]byte(`{}`))
	old.Finish(Complete)
	s := h.stats(model)
	if s.NumRunningQueries != 0 || s.TotalQueryInputSize != 0 || s.StatsCapabilities != nil || h.c.gens[model].dist.count != 0 {
		t.Fatalf("new generation saw old state: %+v", s)
	}
	if h.metric("pylon_engine_stats_stream_invalid_events_total", "reason=unknown_request") != 1 {
		t.Fatal("late event of a retired generation not dropped as unknown_request")
	}
	// Re-adding an existing model starts a new generation too.
	h.c.Begin(RequestInfo{ID: "r2", Model: model, Endpoint: EndpointChat, InputTokens: 7})
	h.c.AddModel(model)
	if s := h.stats(model); s.NumRunningQueries != 0 {
		t.Fatalf("AddModel kept live requests: %+v", s)
	}
	if got := h.c.Models(); len(got) != 1 || got[0] != model {
		t.Fatalf("models %v", got)
	}
}

func TestInertObserverForUnknownModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	o := h.c.Begin(RequestInfo{ID: "a", Model: "nope", Endpoint: EndpointChat, InputTokens: 5})
	if o == nil {
		t.Fatal("Begin returned nil")
	}
	o.Headers(200)
	o.Output([]byte(`{"choices":[{"delta":{"content":"hi"}}]}`))
	if got := o.Finish(Complete); got != Complete {
		t.Fatalf("Finish = %v", got)
	}
	if len(h.c.Models()) != 0 {
		t.Fatal("unknown model appeared")
	}
}

func TestChangedSignals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff})
	drain(h.c)
	h.c.AddModel(model)
	if !signalled(h.c) {
		t.Fatal("AddModel did not signal")
	}
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 5})
	if !signalled(h.c) {
		t.Fatal("Begin did not signal")
	}
	if signalled(h.c) {
		t.Fatal("signal not coalesced/consumed")
	}
	o.Headers(200)
	if !signalled(h.c) {
		t.Fatal("Headers did not signal")
	}
	o.Finish(Cancelled)
	if !signalled(h.c) {
		t.Fatal("Finish did not signal")
	}
	h.c.RemoveModel(model)
	if !signalled(h.c) {
		t.Fatal("RemoveModel did not signal")
	}
	// Many changes without a reader never block.
	for range 100 {
		h.c.AddModel(model)
	}
}

func TestStatsObservedAtFollowsTouches(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeRequired})
	h.c.AddModel(model)
	if got := h.stats(model).StatsObservedAtUnixMs; got != 0 {
		t.Fatalf("fresh generation observed at %d", got)
	}
	h.clk.Advance(time.Second)
	o := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 1})
	if got := h.stats(model).StatsObservedAtUnixMs; got != uint64(epoch.Add(time.Second).UnixMilli()) {
		t.Fatalf("after Begin: %d", got)
	}
	h.clk.Advance(time.Second)
	h.line(`{"v":1,"type":"stats","request_id":"a","model":"%s","tokens_processed":0}`, model)
	if got := h.stats(model).StatsObservedAtUnixMs; got != uint64(epoch.Add(2*time.Second).UnixMilli()) {
		t.Fatalf("after an engine event: %d", got)
	}
	h.clk.Advance(time.Second)
	o.Finish(Cancelled)
	if got := h.stats(model).StatsObservedAtUnixMs; got != uint64(epoch.Add(3*time.Second).UnixMilli()) {
		t.Fatalf("after Finish: %d", got)
	}
	if s := h.stats(model); s.MaxEngineConcurrency != 0 {
		t.Fatalf("max_engine_concurrency %d", s.MaxEngineConcurrency)
	}
}

// With --max-engine-concurrency, a request that finds a free engine slot
// has no local queue (the hub's free-slot rule), whatever the others are
// prefilling; once the slots are taken, their work counts again.
func TestLocalQueueMsFreeSlot(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{StreamMode: ModeOff, InitialInputTPS: 1000, MaxEngineConcurrency: 2})
	h.c.AddModel(model)
	a := h.c.Begin(RequestInfo{ID: "a", Model: model, Endpoint: EndpointChat, InputTokens: 500})
	self := h.c.Begin(RequestInfo{ID: "self", Model: model, Endpoint: EndpointChat, InputTokens: 100})
	if got, ok := h.c.LocalQueueMs(model, 0, self); !ok || got != 0 {
		t.Fatalf("one other request, 2 slots: %d, %v; want 0", got, ok)
	}
	h.c.Begin(RequestInfo{ID: "b", Model: model, Endpoint: EndpointChat, InputTokens: 500})
	if got, ok := h.c.LocalQueueMs(model, 0, self); !ok || got != 1000 {
		t.Fatalf("two others, 2 slots: %d, %v; want 1000 (their 1000 tokens at 1000 tps)", got, ok)
	}
	a.Finish(Cancelled)
	if got, _ := h.c.LocalQueueMs(model, 0, self); got != 0 {
		t.Fatalf("a slot freed: %d, want 0", got)
	}
}
