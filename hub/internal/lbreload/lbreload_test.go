package lbreload

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/lbfactory"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/clock"
)

// syncBuffer is a log sink the reloader and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type fixture struct {
	path    string
	reg     *prometheus.Registry
	log     *syncBuffer
	clk     *clock.Fake
	r       *Reloader
	applied []*Generation
	// currentAtApply is Current's hash when OnApply ran.
	currentAtApply []string
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// newFixture writes content (unless it is "-": no file at all) and builds
// a reloader on it.
func newFixture(t *testing.T, content string, factory lbconfig.Factory) *fixture {
	t.Helper()
	fx := &fixture{reg: prometheus.NewRegistry(), log: &syncBuffer{}, clk: clock.NewFake(t0)}
	if content != "-" {
		fx.path = filepath.Join(t.TempDir(), "lb-config.json")
		fx.write(t, content)
	}
	if factory == nil {
		factory = lbfactory.New
	}
	r, err := New(Options{Path: fx.path, Factory: factory, Registerer: fx.reg, Clock: fx.clk,
		Log: slog.New(slog.NewTextHandler(fx.log, nil)),
		OnApply: func(g *Generation) {
			fx.applied = append(fx.applied, g)
			fx.currentAtApply = append(fx.currentAtApply, fx.r.Current().Hash)
		}})
	if err != nil {
		t.Fatal(err)
	}
	fx.r = r
	return fx
}

func (fx *fixture) write(t *testing.T, content string) {
	t.Helper()
	if err := os.WriteFile(fx.path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (fx *fixture) reloads(res Result) float64 {
	return testutil.ToFloat64(fx.r.reloads.WithLabelValues(string(res)))
}

func (fx *fixture) reload(t *testing.T, want Result) {
	t.Helper()
	if got := fx.r.Reload("sighup"); got != want {
		t.Fatalf("Reload = %s, want %s; log:\n%s", got, want, fx.log.String())
	}
}

const (
	roundRobin = `{"default":"round-robin"}`
	mixed      = `{"default":"random","models":{"m":{"algorithm":"pulsar","seed":"s"},"n":"wait-and-widen"}}`
	// invalid gives power-of-n a field it does not take.
	invalid = `{"models":{"m":{"algorithm":"power-of-n","last_cluster_affinity":true}}}`
)

// A valid new file becomes Current with its hash, after OnApply saw it
// while the old one was still Current; its resolver is a new one.
func TestReloadApplies(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, roundRobin, nil)
	first := fx.r.Current()
	if first.Hash != Hash([]byte(roundRobin)) || len(first.Hash) != 12 || first.LoadedAt != t0 {
		t.Fatalf("first generation: %+v", first)
	}
	fx.write(t, mixed)
	fx.clk.Advance(time.Minute)
	fx.reload(t, Applied)
	cur := fx.r.Current()
	if cur.Hash != Hash([]byte(mixed)) || cur.Resolver == first.Resolver || !cur.LoadedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after the reload: %+v", cur)
	}
	if len(fx.applied) != 1 || fx.applied[0] != cur || fx.currentAtApply[0] != first.Hash {
		t.Fatalf("OnApply: %d calls, current at the call %v; want one, before the swap", len(fx.applied), fx.currentAtApply)
	}
	st := fx.r.Status()
	if st.DefaultLB != "random" || st.Models["m"] != "pulsar" || st.Models["n"] != "wait-and-widen" ||
		st.Path != fx.path || !st.LastReloadOK || st.LastRejected != nil {
		t.Errorf("status: %+v", st)
	}
	if fx.reloads(Applied) != 1 || fx.reloads(Rejected) != 0 || fx.reloads(Unchanged) != 0 {
		t.Errorf("reloads: applied %v rejected %v unchanged %v", fx.reloads(Applied), fx.reloads(Rejected), fx.reloads(Unchanged))
	}
	if !strings.Contains(fx.log.String(), "lb config reloaded") {
		t.Errorf("no reload log:\n%s", fx.log.String())
	}
}

// The same bytes again (a no-op write, a second event of one update) do
// nothing.
func TestReloadUnchanged(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, roundRobin, nil)
	first := fx.r.Current()
	fx.write(t, roundRobin)
	fx.reload(t, Unchanged)
	if fx.r.Current() != first || len(fx.applied) != 0 || fx.reloads(Unchanged) != 1 {
		t.Fatalf("a no-op write changed something: applied %d, unchanged %v", len(fx.applied), fx.reloads(Unchanged))
	}
}

// An invalid file is rejected with a log line naming the entry and the
// field; the old generation keeps serving; the same bytes again are not a
// second rejection; a fixed file is applied.
func TestReloadRejectsInvalid(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, roundRobin, nil)
	first := fx.r.Current()
	fx.write(t, invalid)
	fx.clk.Advance(time.Second)
	fx.reload(t, Rejected)
	if fx.r.Current() != first || len(fx.applied) != 0 {
		t.Fatal("a rejected file replaced the active configuration")
	}
	log := fx.log.String()
	for _, want := range []string{"lb config reload rejected", "field=last_cluster_affinity", `entry="models[\"m\"]"`, "algorithm=power-of-n"} {
		if !strings.Contains(log, want) {
			t.Errorf("the rejection log lacks %s:\n%s", want, log)
		}
	}
	st := fx.r.Status()
	if st.LastReloadOK || st.LastRejected == nil || st.LastRejected.Hash != Hash([]byte(invalid)) ||
		!st.LastRejected.At.Equal(t0.Add(time.Second)) || st.LastRejected.Trigger != "sighup" ||
		!strings.Contains(st.LastRejected.Error, "last_cluster_affinity") || st.Hash != first.Hash {
		t.Errorf("status after the rejection: %+v", st)
	}
	fx.reload(t, Unchanged)
	if fx.reloads(Rejected) != 1 || fx.r.Status().LastReloadOK {
		t.Errorf("the same invalid bytes again: rejected %v, ok %v", fx.reloads(Rejected), fx.r.Status().LastReloadOK)
	}
	fx.write(t, mixed)
	fx.reload(t, Applied)
	st = fx.r.Status()
	if !st.LastReloadOK || st.LastRejected == nil || st.Hash != Hash([]byte(mixed)) {
		t.Errorf("status after the fix: %+v", st)
	}
	// Once something else was applied, the old invalid bytes are news
	// again.
	fx.write(t, invalid)
	fx.reload(t, Rejected)
}

// Validation builds every definition through the factory, as at startup:
// a definition the factory refuses rejects the whole file.
func TestReloadRejectsWhatTheFactoryRefuses(t *testing.T) {
	t.Parallel()
	factory := func(d *lbconfig.Definition) (lb.Picker, error) {
		if d.Algorithm() == lbconfig.Random {
			return nil, errors.New("random is out of stock")
		}
		return lbfactory.New(d)
	}
	fx := newFixture(t, roundRobin, factory)
	fx.write(t, mixed)
	fx.reload(t, Rejected)
	if fx.r.Current().Hash != Hash([]byte(roundRobin)) || !strings.Contains(fx.log.String(), "random is out of stock") {
		t.Fatalf("hash %s, log:\n%s", fx.r.Current().Hash, fx.log.String())
	}
}

// A file that disappeared is rejected, naming the path.
func TestReloadUnreadable(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, roundRobin, nil)
	if err := os.Remove(fx.path); err != nil {
		t.Fatal(err)
	}
	fx.reload(t, Rejected)
	if st := fx.r.Status(); st.LastRejected == nil || !strings.Contains(st.LastRejected.Error, fx.path) {
		t.Errorf("status: %+v", st)
	}
}

// Without a file there is nothing to reload and nothing is counted; the
// built-in configuration has no hash.
func TestNoPath(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, "-", nil)
	fx.reload(t, Unchanged)
	if fx.reloads(Unchanged) != 0 || fx.r.Current().Hash != "" || fx.r.Status().DefaultLB != "power-of-n" {
		t.Errorf("unchanged %v, current %+v", fx.reloads(Unchanged), fx.r.Current())
	}
}

// New fails on an invalid file, as the hub's start must.
func TestNewRejectsInvalid(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lb.json")
	if err := os.WriteFile(path, []byte(invalid), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{Path: path, Factory: lbfactory.New})
	if err == nil || !strings.Contains(err.Error(), "power-of-n config does not support field(s): last_cluster_affinity") {
		t.Fatalf("New: %v", err)
	}
}

// The metrics show the active generation, every result from 0, and the
// shared resolver metrics survive a second generation.
func TestMetrics(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, roundRobin, nil)
	h1 := Hash([]byte(roundRobin))
	want := func(body string) {
		t.Helper()
		if err := testutil.GatherAndCompare(fx.reg, strings.NewReader(body),
			"stargate_lb_config_info", "stargate_lb_config_reloads_total", "stargate_lb_config_last_reload_successful",
			"stargate_lb_config_last_reload_success_timestamp_seconds"); err != nil {
			t.Error(err)
		}
	}
	const help = `
# HELP stargate_lb_config_info The active lb-config: 1 per configured algorithm, model="" for the default and one series per models entry; hash is the first 12 hex digits of the file's SHA-256 ("" without --lb-config-path).
# TYPE stargate_lb_config_info gauge
`
	const tail = `
# HELP stargate_lb_config_last_reload_success_timestamp_seconds Unix time the active lb-config became active (at startup or by its reload).
# TYPE stargate_lb_config_last_reload_success_timestamp_seconds gauge
# HELP stargate_lb_config_last_reload_successful 1 unless the latest lb-config reload was rejected (the active config is then older than the file).
# TYPE stargate_lb_config_last_reload_successful gauge
# HELP stargate_lb_config_reloads_total lb-config reloads (SIGHUP or file watch) by result: applied (new content active), rejected (unreadable or invalid; the previous config keeps serving), unchanged (same content as the active or the last rejected one).
# TYPE stargate_lb_config_reloads_total counter
`
	want(help + `stargate_lb_config_info{algorithm="round-robin",hash="` + h1 + `",model=""} 1` + tail +
		`stargate_lb_config_last_reload_success_timestamp_seconds ` + unix(t0) + `
stargate_lb_config_last_reload_successful 1
stargate_lb_config_reloads_total{result="applied"} 0
stargate_lb_config_reloads_total{result="rejected"} 0
stargate_lb_config_reloads_total{result="unchanged"} 0
`)
	fx.write(t, invalid)
	fx.reload(t, Rejected)
	fx.write(t, mixed)
	fx.clk.Advance(10 * time.Second)
	fx.reload(t, Applied)
	h2 := Hash([]byte(mixed))
	want(help + `stargate_lb_config_info{algorithm="pulsar",hash="` + h2 + `",model="m"} 1
stargate_lb_config_info{algorithm="random",hash="` + h2 + `",model=""} 1
stargate_lb_config_info{algorithm="wait-and-widen",hash="` + h2 + `",model="n"} 1` + tail +
		`stargate_lb_config_last_reload_success_timestamp_seconds ` + unix(t0.Add(10*time.Second)) + `
stargate_lb_config_last_reload_successful 1
stargate_lb_config_reloads_total{result="applied"} 1
stargate_lb_config_reloads_total{result="rejected"} 1
stargate_lb_config_reloads_total{result="unchanged"} 0
`)
	// The resolver metrics are registered once and fed by the new
	// generation's resolver.
	if _, rej := fx.r.Current().Resolver.Resolve(routing.Target{Model: "m"}, "pulsar;seed=x"); rej != nil {
		t.Fatal(rej)
	}
	if n, err := testutil.GatherAndCount(fx.reg, "stargate_routing_expressions_total"); err != nil || n != 21 {
		t.Errorf("routing_expressions_total series: %d, %v", n, err)
	}
}

func unix(t time.Time) string { return strconv.FormatFloat(float64(t.Unix()), 'g', -1, 64) }

// Reloads racing each other and readers stay consistent: every Current is
// one of the files written, whole. Run with -race.
func TestConcurrentReloads(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, roundRobin, nil)
	valid := map[string]bool{Hash([]byte(roundRobin)): true, Hash([]byte(mixed)): true}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			g := fx.r.Current()
			if !valid[g.Hash] || (g.Hash == Hash([]byte(mixed))) != (g.Config.Summary().DefaultLB == "random") {
				t.Errorf("inconsistent generation %s default %s", g.Hash, g.Config.Summary().DefaultLB)
				return
			}
			_ = fx.r.Status()
		}
	})
	for i := range 20 {
		fx.write(t, []string{roundRobin, mixed}[i%2])
		var inner sync.WaitGroup
		for range 2 {
			inner.Go(func() { fx.r.Reload("watch") })
		}
		inner.Wait()
	}
	close(stop)
	wg.Wait()
	if got := fx.reloads(Applied); got != 19 {
		t.Errorf("applied %v, want 19 (the first write is the startup content)", got)
	}
}
