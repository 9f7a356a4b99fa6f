package sim

import (
	"fmt"
	"testing"

	"github.com/stargate-router/stargate/pkg/workload"
)

// equalFleet is n clusters of engines identical engines each, all in one
// region of rttMs, with the mock's default rates and no KV pressure.
func equalFleet(n, engines, slots int, rttMs float64) Fleet {
	f := Fleet{Regions: []Region{{Name: "r", RTTMs: rttMs}}, BlockTokens: 16, Pylon: Pylon{IntervalMs: 1000, ChangeGapMs: 50}}
	for i := range n {
		f.Clusters = append(f.Clusters, Cluster{ID: fmt.Sprintf("c%d", i), Region: "r", Engines: engines,
			Engine: EngineSpec{PrefillTPS: 64000, CachedPrefillTPS: 133000, TTFTMs: 20, TokenDelayMs: 10,
				MaxConcurrency: slots, KVCapacityTokens: 1_600_000, ReportMaxConcurrency: true}})
	}
	return f
}

// open builds an open-loop workload; each request is (at, session, turn,
// new input tokens, output tokens), session "" for anonymous.
type oreq struct {
	at      int64
	session string
	turn    int
	in, out int
}

func openWorkload(t testing.TB, rs ...oreq) *workload.Workload {
	t.Helper()
	w := &workload.Workload{Header: workload.Header{V: workload.Version, Suite: "test", Seed: 7, Model: "m", Mode: workload.ModeOpen}}
	for i, r := range rs {
		src := workload.SourcePromptCacheKey
		if r.session == "" {
			src = workload.SourceNone
		}
		req := workload.Request{Index: i, AtMs: r.at, Session: r.session, Turn: r.turn, Source: src, Endpoint: "chat",
			NewInputTokens: r.in, OutputTokens: r.out}
		if err := req.Validate(&w.Header); err != nil {
			t.Fatal(err)
		}
		w.Requests = append(w.Requests, req)
	}
	return w
}

// closedSessions is a closed-loop workload: workers workers, each running
// its sessions' turns in order.
func closedSessions(t testing.TB, workers, sessions, turns, first, later, out int) *workload.Workload {
	t.Helper()
	w := &workload.Workload{Header: workload.Header{V: workload.Version, Suite: "test", Seed: 11, Model: "m",
		Mode: workload.ModeClosed, Workers: workers}}
	for s := range sessions {
		for turn := 1; turn <= turns; turn++ {
			in := later + s%7*10
			if turn == 1 {
				in = first + s%5*100
			}
			req := workload.Request{Index: len(w.Requests), Worker: s % workers, Session: fmt.Sprintf("s%03d", s), Turn: turn,
				Source: workload.SourceConversation, Endpoint: "chat", NewInputTokens: in, OutputTokens: out + s%3}
			if err := req.Validate(&w.Header); err != nil {
				t.Fatal(err)
			}
			w.Requests = append(w.Requests, req)
		}
	}
	return w
}

func prepare(t testing.TB, w *workload.Workload, f Fleet) *Prepared {
	t.Helper()
	p, err := Prepare(w, "test-fingerprint", f.withDefaults().BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func builtin(t testing.TB, name string) Arm {
	t.Helper()
	a, ok := BuiltinArm(name)
	if !ok {
		t.Fatalf("no built-in arm %q", name)
	}
	return a
}

// runArm runs one arm to the end and returns the runner for inspection.
func runArm(t testing.TB, p *Prepared, f Fleet, arm Arm, opts Options) *runner {
	t.Helper()
	r, err := newRunner(p, f, arm, opts)
	if err != nil {
		t.Fatal(err)
	}
	for r.step() {
	}
	for i := range r.reqs {
		if !r.reqs[i].done {
			t.Fatalf("arm %s: request %d never finished", arm.Name, i)
		}
	}
	return r
}

// clustersOf lists the cluster each request was served by.
func clustersOf(r *runner) []string {
	out := make([]string, len(r.reqs))
	for i := range r.reqs {
		out[i] = r.reqs[i].cluster
	}
	return out
}
