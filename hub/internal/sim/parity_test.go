package sim

import (
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/proxy"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/prefixhash"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// The parity test runs one lb-config through the live proxy (its HTTP
// handler, on a state store, with in-memory tunnels) and through the
// simulator's hub (newHub, newPass, pass), feeding both the same pylon
// registrations at the same virtual times, the same requests and the same
// random stream, and requires the same decisions: the chosen cluster, every
// wait, the rejection reason and the session class. Both sides run their
// passes through hub/internal/dispatch; the test pins that each builds the
// pass state the same way (deadlines, request fields, route) and acts on
// the outcome the same way (wait durations, when to reject, where to
// reserve), so a second copy of the loop in either would show here. No
// registration lands inside a request's wait here; that a registration
// ends a wait on both sides is TestSleepersWakeOnAppliedReports's and the
// proxy's TestUntimedWaitWakesOnPublication's.
//
// The decisions depend on everything compared: the random stream (the
// "another seed diverges" subtests below show a different stream changes
// them), the sleep bound and deadlines (a simulator that cut waits at
// 25 ms, as the hub once polled, fails the wait-and-widen configs), and
// the reservations
// (reports reach the stores a third of the fleet at a time, so earlier
// requests' reservations shape later choices; a simulator that did not
// reserve fails power-of-n at the second request).

// parityConfigs are the lb-configs compared: the six algorithms, the two
// session-aware ones with last_cluster_affinity and an affinity wait, one
// with max_input_work_seconds, and the prefix-aware ones (prefix-affinity,
// and wait-and-widen's prefix_affinity), where the proxy and the
// simulator's hub each keep their own prefix index and must also send
// each request to the same backend with the same key (the prompt's
// anchor for a keyless request) and count the same prefix tier.
var parityConfigs = map[string]string{
	"power-of-n":  `{"models":{"m":{"algorithm":"power-of-n","sample_count":2}}}`,
	"random":      `{"models":{"m":"random"}}`,
	"round-robin": `{"models":{"m":"round-robin"}}`,
	"pulsar":      `{"models":{"m":{"algorithm":"pulsar","consider_kv_free_tokens":true}}}`,
	"wait-and-widen+lca": `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_backend_selection_count":1,
		"cache_affinity_wait_ms":100,"cache_affinity_input_tokens_scale":0.5,"max_queued":0,"n":2,
		"last_cluster_affinity":true}}}`,
	"pulsar-wait-and-widen+lca": `{"models":{"m":{"algorithm":"pulsar-wait-and-widen","cache_affinity_wait_ms":60,
		"band_widen_interval_ms":30,"max_queued":0,"last_cluster_affinity":true}}}`,
	"power-of-n+admission": `{"models":{"m":{"algorithm":"power-of-n","sample_count":2,"max_input_work_seconds":0.6}}}`,
	"prefix-affinity+lca":  `{"models":{"m":{"algorithm":"prefix-affinity","last_cluster_affinity":true,"split_guard":0.5}}}`,
	"wait-and-widen+prefix+lca": `{"models":{"m":{"algorithm":"wait-and-widen","cache_affinity_backend_selection_count":1,
		"cache_affinity_wait_ms":100,"max_queued":0,"n":2,"last_cluster_affinity":true,"prefix_affinity":true}}}`,
}

const paritySeed = 42

// parityBackends are the fleet: cluster ca has two backends, so the
// store's round robin inside a cluster is compared too.
var parityBackends = []state.Backend{
	{ID: "a1", ClusterID: "ca", URL: "http://a1"}, {ID: "a2", ClusterID: "ca", URL: "http://a2"},
	{ID: "b1", ClusterID: "cb", URL: "http://b1"}, {ID: "c1", ClusterID: "cc", URL: "http://c1"},
	{ID: "d1", ClusterID: "cd", URL: "http://d1"},
}

var parityRTT = map[string]time.Duration{"ca": time.Millisecond, "cb": 4 * time.Millisecond,
	"cc": 20 * time.Millisecond, "cd": 40 * time.Millisecond}

// parityRegistration is backend b's report before request i: load that
// moves with i, so that clusters fill (running at the engine limit),
// drain, lose their input rate (every cluster at once on every 11th
// request, which makes input-work admission undefined) and run short of
// KV cache.
func parityRegistration(b state.Backend, i int) *protocol.Registration {
	c := int(b.ClusterID[1] - 'a')
	tps := 1000.0 + 250*float64(c)
	if i%11 == 10 {
		tps = 0
	}
	used := uint64((i*3+c*5)%8) * 1000
	s := &protocol.ModelStats{
		LastMeanInputTPS:      tps,
		MaxInputTPS:           tps,
		MaxEngineConcurrency:  4,
		NumRunningQueries:     uint64((i*7 + c*3) % 6),
		QueueSize:             uint64((i + c) % 3),
		QueuedInputSize:       uint64((i*13+c*5)%4) * 400,
		KVCacheCapacityTokens: 8000,
		KVCacheUsedTokens:     used,
		KVCacheFreeTokens:     8000 - used,
	}
	return &protocol.Registration{V: protocol.Version, InferenceServerID: b.ID, ClusterID: b.ClusterID,
		Models: map[string]protocol.ModelEntry{"m": {Status: protocol.StatusActive, Stats: s}}}
}

// applyReports delivers the reports due before request i: every backend
// before the first request and when the input rates drop to zero, else a
// third of them each time, so the reservations earlier requests made stay
// in the snapshots until their backend's next report, and decisions depend
// on them.
func applyReports(store *state.Store, i int) {
	for k, b := range parityBackends {
		if i == 0 || i%11 == 10 || (i+k)%3 == 0 {
			store.Apply(b, parityRegistration(b, i), parityRTT[b.ClusterID], true)
		}
	}
}

// parityRequest is request i: three sessions (one anonymous slot, and
// one slot of payload keys), hints that return, go stale ("gone") or are
// absent, sizes up to 3000 tokens, some over the admission limit, and
// prompt summaries of three prompt families at lengths that grow and
// shrink, so prefix-aware routes find holders at several depths (every
// sixth request has none).
type parityRequest struct {
	tokens   uint64
	affinity string
	hint     string
	summary  prefixhash.Summary
}

func parityRequestAt(i int) parityRequest {
	r := parityRequest{tokens: uint64(200 + (i*577)%2800)}
	switch s := i % 4; {
	case s < 2:
		r.affinity = "mt:v1:session:s" + strconv.Itoa(s)
	case s == 2:
		r.affinity = "mt:v1:payload:p" + strconv.Itoa(i)
	}
	if i%6 != 5 {
		family := make([]uint64, 40+(i*13)%60)
		for k := range family {
			family[k] = uint64(i%3)<<32 | uint64(k)
		}
		r.summary = prefixhash.Summarize(family, prefixhash.DefaultBlockTokens)
	}
	switch i % 5 {
	case 1, 3:
		r.hint = []string{"ca", "cb", "cc", "cd"}[(i/5)%4]
	case 4:
		r.hint = "gone"
	}
	return r
}

const parityRequests = 60

// parityStep is the virtual time between requests.
const parityStep = 40 * time.Millisecond

// parityStart is when request i arrives, unless the previous one is still
// waiting then: requests are sent one after the other, so each starts at
// the later of the two.
func parityStart(i int) time.Time { return Epoch.Add(time.Duration(i) * parityStep) }

// decision is what one request got, on either side.
type decision struct {
	Cluster string          // the chosen cluster, "" when rejected
	Waits   []time.Duration // every wait before the choice or the rejection
	Reject  string          // the rejection: an admission reason, or "overloaded"
	Session string          // session state/selection class, "" when unclassified
	// Backend is the chosen backend and Key the x-cache-affinity-key it
	// was sent (the key its pylon picks an engine by): the prompt's
	// anchor for a keyless request on a prefix-aware route.
	Backend, Key string
	// Tier is the prefix tier of a request with a summary that was
	// answered (stargate_prefix_routed_total's label), "" otherwise.
	Tier string
}

func (d decision) String() string {
	return fmt.Sprintf("{cluster %q backend %q key %q tier %q waits %v reject %q session %q}", d.Cluster, d.Backend, d.Key, d.Tier,
		d.Waits, d.Reject, d.Session)
}

func TestProxyAndSimulatorDecideAlike(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(parityConfigs)) {
		t.Run(name, func(t *testing.T) {
			cfg := parityConfigs[name]
			live := runProxySide(t, cfg)
			sim := runSimSide(t, cfg, paritySeed)
			for i := range live {
				if !equalDecision(live[i], sim[i]) {
					t.Fatalf("request %d: proxy %v, simulator %v", i, live[i], sim[i])
				}
			}
			requireVariety(t, name, live)
		})
	}
	// The comparison can fail: with another random stream the simulator
	// decides differently for the algorithms that draw from it, so equal
	// decisions above mean the two sides shared the stream, the state and
	// the rules, not that every decision is forced.
	for _, name := range []string{"power-of-n", "random"} {
		t.Run(name+"/another seed diverges", func(t *testing.T) {
			live := runProxySide(t, parityConfigs[name])
			other := runSimSide(t, parityConfigs[name], paritySeed+1)
			if slices.EqualFunc(live, other, equalDecision) {
				t.Fatal("a different seed gave the same decisions: the comparison would not notice a different stream")
			}
		})
	}
}

// requireVariety checks that the scenario exercised what the config is
// about, so the parity is not won on trivial decisions.
func requireVariety(t *testing.T, name string, ds []decision) {
	t.Helper()
	clusters := map[string]bool{}
	waits, rejects, sessions := 0, map[string]bool{}, 0
	for _, d := range ds {
		if d.Cluster != "" {
			clusters[d.Cluster] = true
		}
		waits += len(d.Waits)
		if d.Reject != "" {
			rejects[d.Reject] = true
		}
		if d.Session != "" {
			sessions++
		}
	}
	t.Logf("%s: clusters %v, %d waits, rejections %v, %d classified", name, clusters, waits, rejects, sessions)
	if len(clusters) < 2 {
		t.Errorf("%s: every request went to %v", name, clusters)
	}
	switch {
	case strings.Contains(name, "wait-and-widen") && (waits == 0 || sessions == 0):
		t.Errorf("%s: %d waits and %d classified requests, want some of each", name, waits, sessions)
	case strings.Contains(name, "admission") && (!rejects[dispatch.ReasonInputWorkLimit] || !rejects[dispatch.ReasonInputWorkUnavailable]):
		t.Errorf("%s: rejections %v, want both admission reasons", name, rejects)
	}
	if strings.Contains(name, "prefix") {
		anchored, tiers := 0, map[string]int{}
		for _, d := range ds {
			if strings.HasPrefix(d.Key, prefixhash.AnchorKeyPrefix) {
				anchored++
			}
			tiers[d.Tier]++
		}
		t.Logf("%s: %d sent by their anchor, tiers %v", name, anchored, tiers)
		if anchored == 0 || tiers["cache"] == 0 || tiers["load"] == 0 {
			t.Errorf("%s: %d requests sent by their prompt's anchor, tiers %v: want some, and cache and load choices", name, anchored, tiers)
		}
	}
}

func equalDecision(a, b decision) bool {
	return a.Cluster == b.Cluster && a.Backend == b.Backend && a.Key == b.Key && a.Tier == b.Tier && a.Reject == b.Reject &&
		a.Session == b.Session && slices.Equal(a.Waits, b.Waits)
}

// runSimSide runs the requests through the simulator's hub: newPass at
// arrival, then pass after pass, the virtual clock moved by each wait, as
// the runner's evDecide events do.
func runSimSide(t *testing.T, cfg string, seed uint64) []decision {
	t.Helper()
	h, err := newHub([]byte(cfg), "m", Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]decision, parityRequests)
	for i := range out {
		h.clk.Set(parityStart(i)) // Set never moves the clock back
		at := h.clk.Now()
		applyReports(h.store, i)
		pr := parityRequestAt(i)
		// The proxy gives each request a stream PCG(seed, n) from its pool,
		// n counting the streams it made; a new proxy per request, seeded
		// with seed+i, makes that PCG(seed+i, 1).
		rng := rand.New(rand.NewPCG(seed+uint64(i), 1)) //nolint:gosec // G404: a test stream
		rr := routing.Request{ID: "r" + strconv.Itoa(i), InputTokens: pr.tokens, AffinityKey: pr.affinity,
			ReceivedAt: at, LastClusterID: pr.hint}
		key := h.prefixRequest(&rr, pr.summary)
		pass := h.newPass(rr)
		d := &out[i]
		for {
			o, b, ok := h.pass(&pass, key, h.clk.Now(), rng)
			if !ok {
				t.Fatalf("request %d: chosen cluster %s has no backend", i, o.Decision.ClusterID)
			}
			switch o.Kind {
			case dispatch.Wait:
				d.Waits = append(d.Waits, o.Wait)
				h.clk.Advance(o.Wait)
				continue
			case dispatch.Chosen:
				d.Cluster, d.Backend, d.Key = b.ClusterID, b.ID, key
				if o.SessionSelection != "" {
					d.Session = pass.Req.Session.String() + "/" + o.SessionSelection
				}
				if !pr.summary.Empty() {
					d.Tier = o.Decision.PrefixTier.String()
				}
				if o.Decision.PrefixMark {
					// The proxy marks when the 2xx headers arrive: at once
					// from the memory tunnel, before the next request.
					h.markPrefix(pr.summary, b.ClusterID)
				}
			case dispatch.Rejected:
				d.Reject = o.Reason
			default:
				d.Reject = "overloaded"
			}
			break
		}
	}
	return out
}

// runProxySide sends the requests through the proxy's handler,
// synchronously, with a clock on which every wait passes at once.
func runProxySide(t *testing.T, cfg string) []decision {
	t.Helper()
	clk := &stepClock{now: Epoch}
	store := state.New(clk)
	parsed, err := lbconfig.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	resolver, err := lbconfig.NewResolver(parsed, lbfactory.New, lbconfig.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pcfg := proxy.Defaults()
	pcfg.Clock, pcfg.Log = clk, slog.New(slog.DiscardHandler)
	pcfg.Metrics = proxy.NewMetrics(reg, "stargate_")
	index, err := prefixindex.New(prefixindex.DefaultConfig(), clk)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.Prefix = index
	tun := &memoryTunnels{}
	out := make([]decision, parityRequests)
	for i := range out {
		if start := parityStart(i); start.After(clk.now) {
			clk.now = start
		}
		applyReports(store, i)
		before := counters(t, reg)
		clk.waits = nil
		rec := httptest.NewRecorder()
		pcfg.Seed = paritySeed + uint64(i)
		proxy.New(pcfg, store, tun, resolver).Handler().ServeHTTP(rec, parityHTTPRequest(i, parityRequestAt(i)))
		out[i] = proxyDecision(t, i, rec, clk.waits, diff(counters(t, reg), before))
		if out[i].Cluster != "" {
			out[i].Backend, out[i].Key = tun.backend, tun.key
		}
	}
	return out
}

func parityHTTPRequest(i int, pr parityRequest) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(`{}`))
	r.Header.Set(headers.RequestID, "r"+strconv.Itoa(i))
	r.Header.Set(headers.Model, "m")
	r.Header.Set(headers.InputTokens, strconv.FormatUint(pr.tokens, 10))
	if pr.affinity != "" {
		r.Header.Set(headers.CacheAffinityKey, pr.affinity)
	}
	if pr.hint != "" {
		r.Header.Set(headers.StargateLastClusterID, pr.hint)
	}
	if !pr.summary.Empty() {
		r.Header.Set(headers.StargatePromptPrefix, prefixhash.FormatHeader(pr.summary))
	}
	return r
}

// proxyDecision reads the proxy's decision from its answer and from the
// metrics the request moved.
func proxyDecision(t *testing.T, i int, rec *httptest.ResponseRecorder, waits []time.Duration, moved map[string]float64) decision {
	t.Helper()
	d := decision{Waits: waits}
	switch rec.Code {
	case http.StatusOK:
		d.Cluster = rec.Header().Get(headers.StargateClusterID)
	case http.StatusServiceUnavailable:
		d.Reject = "overloaded"
		for _, reason := range []string{dispatch.ReasonInputWorkLimit, dispatch.ReasonInputWorkUnavailable} {
			if moved["admission_rejections_total/"+reason] > 0 {
				d.Reject = reason
			}
		}
	default:
		t.Fatalf("request %d: status %d: %s", i, rec.Code, rec.Body)
	}
	for k, v := range moved {
		if rest, ok := strings.CutPrefix(k, "routing_session_selections_total/"); ok && v > 0 {
			d.Session = rest
		}
		if rest, ok := strings.CutPrefix(k, "prefix_routed_total/"); ok && v > 0 {
			d.Tier = rest
		}
	}
	return d
}

// counters returns the proxy's admission and session counters by
// "<name>/<label values>".
func counters(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		name := strings.TrimPrefix(mf.GetName(), "stargate_")
		var keep []string // the labels that name a series here, in order
		switch name {
		case "admission_rejections_total":
			keep = []string{"reason"}
		case "routing_session_selections_total":
			keep = []string{"session_state", "selection"}
		case "prefix_routed_total":
			keep = []string{"tier"}
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			key := name
			for _, k := range keep {
				key += "/" + labels[k]
			}
			out[key] = m.GetCounter().GetValue()
		}
	}
	return out
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// stepClock is the proxy's clock in the parity test. The handler runs on
// the test's goroutine, so a timer can fire at once: NewTimer and Reset
// move the time to the deadline and record the wait (no registration
// lands inside a request's wait here, so nothing wakes it sooner).
// AfterFunc (the head timeout) never fires: the in-memory tunnel answers
// at once.
type stepClock struct {
	now   time.Time
	waits []time.Duration
}

var _ clock.Clock = (*stepClock)(nil)

func (c *stepClock) Now() time.Time                  { return c.now }
func (c *stepClock) Since(t time.Time) time.Duration { return c.now.Sub(t) }

func (c *stepClock) NewTimer(d time.Duration) clock.Timer {
	t := stepTimer{c: c, ch: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

func (c *stepClock) AfterFunc(time.Duration, func()) clock.Timer { return stepTimer{} }

type stepTimer struct {
	c  *stepClock
	ch chan time.Time
}

func (s stepTimer) C() <-chan time.Time { return s.ch }
func (stepTimer) Stop() bool            { return false }

func (s stepTimer) Reset(d time.Duration) bool {
	if s.c == nil {
		return false
	}
	s.c.now = s.c.now.Add(d)
	s.c.waits = append(s.c.waits, d)
	s.ch <- s.c.now
	return false
}

// memoryTunnels answer every request at once with an empty 200, and
// remember the backend and the x-cache-affinity-key of the latest one.
type memoryTunnels struct {
	backend, key string
}

func (m *memoryTunnels) RoundTripper(id string) (http.RoundTripper, bool) {
	return answerOK{m: m, backend: id}, true
}

type answerOK struct {
	m       *memoryTunnels
	backend string
}

func (a answerOK) RoundTrip(r *http.Request) (*http.Response, error) {
	a.m.backend, a.m.key = a.backend, headers.First(r.Header, headers.CacheAffinityKey) // the hub files the names it sends in lower case
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
}
