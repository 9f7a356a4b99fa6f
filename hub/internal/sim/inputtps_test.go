package sim

import (
	"math"
	"testing"
	"time"
)

// The pylon's input rate: the seed counts as five samples, the mean moves
// with every sample and never decays, max_input_tps keeps the highest
// mean (the seed included); without a seed nothing is published before
// five samples.
func TestPylonTPSRunningMean(t *testing.T) {
	s := seededTPS(4000)
	if s.published() != 4000 || s.max != 4000 {
		t.Fatalf("seeded: published %v max %v, want 4000 and 4000", s.published(), s.max)
	}
	s.add(1000)
	if want := (5*4000.0 + 1000) / 6; math.Abs(s.published()-want) > 1e-9 || s.max != 4000 {
		t.Errorf("after a slow sample: published %v max %v, want %v and 4000", s.published(), s.max, want)
	}
	s.add(100_000)
	if want := (5*4000.0 + 1000 + 100_000) / 7; math.Abs(s.published()-want) > 1e-9 || s.max != s.published() {
		t.Errorf("after a fast sample: published %v max %v, want %v for both", s.published(), s.max, want)
	}
	s.add(0)
	s.add(-5)
	if s.n != 7 {
		t.Errorf("non-positive samples counted: n = %d, want 7", s.n)
	}

	u := seededTPS(0)
	for i := range 4 {
		u.add(1000 * float64(i+1))
		if u.published() != 0 || u.max != 0 {
			t.Fatalf("unseeded after %d samples: published %v max %v, want 0", i+1, u.published(), u.max)
		}
	}
	u.add(5000)
	if u.published() != 3000 || u.max != 3000 {
		t.Errorf("unseeded after 5 samples: published %v max %v, want 3000", u.published(), u.max)
	}

	if got := inputSample(100, time.Millisecond); got != 10_000 {
		t.Errorf("a 1 ms span: %v tokens/s, want 100 over the 10 ms floor = 10000", got)
	}
	if got := inputSample(3000, 1500*time.Millisecond); got != 2000 {
		t.Errorf("3000 tokens over 1.5 s: %v, want 2000", got)
	}
}

// One request alone on a one-engine pylon teaches it the rate the live
// pylon would measure, its prompt over its prefill plus the TTFT base, so
// the published rate falls from the seed by a sixth of the difference;
// max_input_tps keeps the seed. A pinned pylon publishes the seed.
func TestPylonLearnsInputRate(t *testing.T) {
	for _, pin := range []bool{false, true} {
		f := equalFleet(1, 1, 4, 2)
		f.Pylon.PinInputTPS = pin
		p := prepare(t, openWorkload(t, oreq{0, "s", 1, 1000, 5}), f)
		r := runArm(t, p, f, builtin(t, "power-of-n"), Options{Seed: 1})
		st := r.registration(r.pylons[0]).Models[r.p.Model].Stats
		const seed = 64000.0
		tokens := r.reqs[0].pr.tokens
		span := f.Clusters[0].Engine.prefillWork(tokens, 0) + msDuration(f.Clusters[0].Engine.TTFTMs)
		want := (5*seed + float64(tokens)/span.Seconds()) / 6
		if pin {
			want = seed
		}
		if math.Abs(st.LastMeanInputTPS-want) > 1e-6*want || st.MaxInputTPS != seed {
			t.Errorf("pinned %v: last_mean_input_tps %v max %v, want %v and %v", pin, st.LastMeanInputTPS, st.MaxInputTPS, want, seed)
		}
	}
}

// While a request streams, the live pylon's collector sees a change at
// every output chunk, so the pylon reports every change gap (50 ms), not
// only on its 1 s interval: a request arriving at 0 and streaming until
// about 1026 ms gets a report at 50, 100, …, 1000 ms.
func TestPylonReportsWhileStreaming(t *testing.T) {
	f := equalFleet(1, 1, 4, 2)
	p := prepare(t, openWorkload(t, oreq{0, "s", 1, 1000, 100}), f)
	r := runArm(t, p, f, builtin(t, "power-of-n"), Options{Seed: 1})
	if got := r.pylons[0].reportSeq; got != 20 {
		t.Errorf("%d reports while the request streamed, want 20 (every 50 ms)", got)
	}
}

// A warm-up leaves each arm's pylons the rate they learned over the
// warm-up workloads, one after another, and nothing else: the caches start
// empty (a workload replayed after itself finds none of its first turns
// cached), and greedy-ttft, which reads no pylon statistics, skips it.
func TestWarmupCarriesLearnedRate(t *testing.T) {
	f := equalFleet(2, 1, 2, 2)
	w := prepare(t, closedSessions(t, 2, 6, 3, 800, 100, 20), f)
	arm := builtin(t, "power-of-n")

	first := runArm(t, w, f, arm, Options{Seed: 1})
	second, err := newRunner(w, f, arm, Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range first.pylons {
		second.pylons[i].tps = p.tps
	}
	for second.step() {
	}
	learned, err := warmUp(f, arm, Options{Seed: 1, Warmup: []*Prepared{w, w}})
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range second.pylons {
		if learned[i] != p.tps {
			t.Errorf("pylon %s: warm-up left %+v, want %+v (two runs in a row)", p.id, learned[i], p.tps)
		}
		if p.tps == seededTPS(64000) {
			t.Errorf("pylon %s learned nothing", p.id)
		}
	}

	res, err := Run(w, f, arm, Options{Seed: 1, Warmup: []*Prepared{w}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cache.NewPct != 0 {
		t.Errorf("after a warm-up with the same prompts, first turns %v%% cached, want 0 (caches start empty)", res.Cache.NewPct)
	}
	if g, _ := warmUp(f, builtin(t, GreedyTTFTName), Options{Warmup: []*Prepared{w}}); g != nil {
		t.Errorf("greedy-ttft warmed up: %+v", g)
	}
}
