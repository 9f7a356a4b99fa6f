package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// The wake measurements: how long after the publication that gives it
// room a waiting request passes (the added wait latency), and what a
// waiting request costs the hub until it is admitted. Both run the
// proxy's handler without sockets, on one cluster "c" of one backend "w"
// whose registration says how many engine slots are free.

// slotPicker chooses cluster c while its snapshot shows a free engine slot
// (the hub's reservations take one each), and otherwise asks to wait: a
// timed wait of a minute, like a long affinity wait, or (untimed) none,
// which only x-max-wait-ms turns into a wait. admitted records when it
// chose, on the proxy's clock.
type slotPicker struct {
	timed    bool
	clk      clock.Clock
	admitted chan time.Time
	passes   atomic.Int32
}

func (p *slotPicker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, _ *rand.Rand) (routing.Decision, bool) {
	p.passes.Add(1)
	for i := range snap.Clusters {
		if s := &snap.Clusters[i].Stats; s.NumRunningQueries < s.MaxEngineConcurrency {
			if p.admitted != nil {
				p.admitted <- p.clk.Now()
			}
			return lb.NewDecision(snap, i, 1, req), true
		}
	}
	if p.timed {
		return routing.Decision{Wait: time.Minute}, false
	}
	return routing.Decision{}, false
}

// wakeBackend is the one backend of the wake measurements.
var wakeBackend = state.Backend{ID: "w", ClusterID: "c", URL: "http://w", RoutingKey: rk}

// wakeRegistration is w's report with free of its 4 engine slots free.
func wakeRegistration(free uint64) *protocol.Registration {
	s := &protocol.ModelStats{LastMeanInputTPS: 1000, MaxEngineConcurrency: 4, NumRunningQueries: 4 - free}
	return &protocol.Registration{V: protocol.Version, InferenceServerID: wakeBackend.ID, ClusterID: wakeBackend.ClusterID,
		Models: map[string]protocol.ModelEntry{model: {Status: protocol.StatusActive, Stats: s}}}
}

// instantRT answers every request at once with an empty 200.
type instantRT struct{}

func (instantRT) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}, nil
}

// wakeProxy is a proxy on store with the slot picker and the instant
// tunnel, on clk.
func wakeProxy(store *state.Store, clk clock.Clock, sp *slotPicker) http.Handler {
	cfg := Defaults()
	cfg.Clock, cfg.Log, cfg.Seed, cfg.StartupGrace = clk, slog.New(slog.DiscardHandler), 1, 0
	return New(cfg, store, tunnels{wakeBackend.ID: instantRT{}}, fixedResolver{lb.Route{Algorithm: "slot", Picker: sp}}).Handler()
}

func wakeRequest(ctx context.Context, untimed bool) *http.Request {
	r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
	r.Header = validHeaders()
	if untimed {
		r.Header.Set(headers.MaxWaitMs, "60000")
	}
	return r
}

// measureWakeLatency runs, in a synctest bubble (virtual time), one
// waiting request per offset: the request arrives with no slot free, the
// slot is published offset later, and the time from that publication to
// the pass that chooses the cluster is the wait's added latency.
func measureWakeLatency(t *testing.T, untimed bool, offsets []time.Duration) []time.Duration {
	t.Helper()
	var added []time.Duration
	synctest.Test(t, func(t *testing.T) {
		clk := clock.Real{}
		store := state.New(clk)
		sp := &slotPicker{timed: !untimed, clk: clk, admitted: make(chan time.Time, 1)}
		h := wakeProxy(store, clk, sp)
		for _, off := range offsets {
			store.Apply(wakeBackend, wakeRegistration(0), time.Millisecond, true)
			done := make(chan int)
			go func() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, wakeRequest(context.Background(), untimed))
				done <- rec.Code
			}()
			synctest.Wait() // it has passed once and sleeps
			time.Sleep(off)
			published := clk.Now()
			store.Apply(wakeBackend, wakeRegistration(1), time.Millisecond, true)
			at := <-sp.admitted
			if code := <-done; code != http.StatusOK {
				t.Fatalf("status %d", code)
			}
			added = append(added, at.Sub(published))
		}
	})
	return added
}

// wakeOffsets spread the publication over 50 ms after the request's
// first pass, at a step prime to the polls' periods.
func wakeOffsets() []time.Duration {
	var out []time.Duration
	for i := range 50 {
		out = append(out, time.Duration(i)*time.Millisecond+time.Duration(i*137%1000)*time.Microsecond)
	}
	return out
}

// TestWakeLatency measures the added wait latency of a timed and an
// untimed wait over publications spread across 50 ms: none, since the
// publication itself wakes the request (with the 25 ms poll it was 12.5 ms
// on average for a timed wait, up to 25 ms, and 3.2 ms for an untimed
// one, up to 9 ms).
func TestWakeLatency(t *testing.T) {
	for _, untimed := range []bool{false, true} {
		added := measureWakeLatency(t, untimed, wakeOffsets())
		var sum, worst time.Duration
		for _, d := range added {
			sum += d
			worst = max(worst, d)
		}
		t.Logf("untimed=%v: added wait latency mean %v, max %v over %d publications", untimed,
			sum/time.Duration(len(added)), worst, len(added))
		if worst != 0 {
			t.Errorf("untimed=%v: a request passed up to %v after the publication that gave it room", untimed, worst)
		}
	}
}

// BenchmarkWaitingAdmission keeps waiters requests waiting for the one
// cluster's slot while its backend registers every interval, one
// registration in admitEvery freeing a slot (the others show it full), so
// each op is one waiting request admitted. It reports the hub's CPU time
// (user and system, the whole process) per admitted request. The proxy
// runs on the wall clock, as a poll once did on its real timers.
func BenchmarkWaitingAdmission(b *testing.B) {
	for _, untimed := range []bool{false, true} {
		for _, tc := range []struct {
			every      time.Duration
			admitEvery int
		}{{2 * time.Millisecond, 1}, {20 * time.Millisecond, 1}, {2 * time.Millisecond, 10}} {
			for _, waiters := range []int{16, 128} {
				wait := "timed"
				if untimed {
					wait = "untimed"
				}
				b.Run(fmt.Sprintf("wait=%s/waiters=%d/every=%v/admit=1in%d", wait, waiters, tc.every, tc.admitEvery), func(b *testing.B) {
					benchWaitingAdmission(b, untimed, waiters, tc.every, tc.admitEvery)
				})
			}
		}
	}
}

func benchWaitingAdmission(b *testing.B, untimed bool, waiters int, interval time.Duration, admitEvery int) {
	clk := clock.Real{}
	store := state.New(clk)
	store.Apply(wakeBackend, wakeRegistration(0), time.Millisecond, true)
	sp := &slotPicker{timed: !untimed, clk: clk}
	h := wakeProxy(store, clk, sp)
	ctx, cancel := context.WithCancel(context.Background())
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for range waiters {
		wg.Go(func() {
			for ctx.Err() == nil {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, wakeRequest(ctx, untimed))
				if rec.Code == http.StatusOK {
					admitted.Add(1)
				}
			}
		})
	}
	// Let every waiter take its first pass and sleep before measuring.
	time.Sleep(50 * time.Millisecond)
	before := cpuTime()
	b.ResetTimer()
	want := admitted.Load() + int64(b.N)
	tick := time.NewTicker(interval)
	for n := 1; admitted.Load() < want; n++ {
		<-tick.C
		free := uint64(0)
		if n%admitEvery == 0 {
			free = 1
		}
		store.Apply(wakeBackend, wakeRegistration(free), time.Millisecond, true)
	}
	b.StopTimer()
	cpu := cpuTime() - before
	tick.Stop()
	cancel()
	wg.Wait()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/req")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
