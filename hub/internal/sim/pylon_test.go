package sim

import (
	"fmt"
	"testing"
)

// pylonFleet is one cluster of one pylon in front of engines engines with
// slots slots each, engine affinity as given.
func pylonFleet(engines, slots int, affinityMode string) Fleet {
	f := equalFleet(1, 1, slots, 2)
	f.Clusters[0].Engines = 0
	f.Clusters[0].Pylons, f.Clusters[0].EnginesPerPylon = 1, engines
	f.Pylon.EngineAffinity = affinityMode
	return f
}

// newIdleRunner builds a runner on f with nothing run yet.
func newIdleRunner(t *testing.T, f Fleet) *runner {
	t.Helper()
	p := prepare(t, openWorkload(t, oreq{0, "x", 1, 10, 1}), f)
	r, err := newRunner(p, f, builtin(t, "power-of-n"), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hold makes e look busy: n requests decoding, holding slots.
func hold(e *engine, n int) {
	e.decoding += n
	e.running += n
}

// On an idle pylon a key always gets the same engine, and different keys
// spread over the engines; a key leaves its engine only when that engine
// is over the load bound (ceil(1.25·(load+1)/engines)) or has no free
// slot, and then takes the least loaded one.
func TestPylonEngineChoiceByKey(t *testing.T) {
	r := newIdleRunner(t, pylonFleet(4, 4, EngineAffinityOn))
	p := r.pylons[0]
	seen := map[*engine]bool{}
	for i := range 64 {
		key := fmt.Sprintf("mt:v1:session:%d", i)
		first := r.pickEngine(p, key)
		for range 3 {
			if e := r.pickEngine(p, key); e != first {
				t.Fatalf("key %s: engine %s then %s on an idle pylon", key, first.id, e.id)
			}
		}
		seen[first] = true
	}
	if len(seen) != 4 {
		t.Errorf("64 keys used %d of 4 engines", len(seen))
	}

	const key = "mt:v1:session:hot"
	home := r.pickEngine(p, key)
	// One request on home: total 1, bound ceil(1.25·2/4) = 1, and home
	// would carry 2: the key spills to an idle engine.
	hold(home, 1)
	if e := r.pickEngine(p, key); e == home || e.outstanding() != 0 {
		t.Errorf("home at the bound: picked %s (load %d), want another, idle engine", e.id, e.outstanding())
	}
	// Every other engine as busy as home: back within the bound.
	for _, e := range p.engines {
		if e != home {
			hold(e, 1)
		}
	}
	if e := r.pickEngine(p, key); e != home {
		t.Errorf("balanced pylon: picked %s, want home %s", e.id, home.id)
	}
	// Home saturated (all 4 slots held) while the others have free slots
	// and the bound would still allow it: full moves the key.
	r.factor = -1 // no load bound: only Full moves a key
	hold(home, 3)
	if e := r.pickEngine(p, key); e == home {
		t.Errorf("saturated home %s still picked", home.id)
	}
	// Without a key: the least loaded engine.
	if e := r.pickEngine(p, ""); e.outstanding() != 1 {
		t.Errorf("keyless request went to %s with load %d, want a least loaded one", e.id, e.outstanding())
	}
}

// With engine_affinity_when_full "queue" a key stays on its engine when
// that engine's slots are all held (the request waits there for one, to
// prefill from the engine's cache), and leaves it only past the load
// bound; a request without a key still avoids a full engine.
func TestPylonEngineChoiceQueuesOnFullEngine(t *testing.T) {
	f := pylonFleet(4, 4, EngineAffinityOn)
	f.Pylon.EngineAffinityWhenFull = EngineFullQueue
	r := newIdleRunner(t, f)
	p := r.pylons[0]
	const key = "mt:v1:session:hot"
	home := r.pickEngine(p, key)
	for _, e := range p.engines {
		hold(e, 1)
	}
	hold(home, 3) // home full, the others with free slots, loads 4,1,1,1
	// bound ceil(2·8/4) = 4 < 5: past it the key moves even in queue mode
	if e := r.pickEngine(p, key); e == home {
		t.Errorf("home %s over the load bound still picked", home.id)
	}
	r.factor = -1 // no load bound: only Full could move the key
	if e := r.pickEngine(p, key); e != home {
		t.Errorf("full home: picked %s, want home %s (queue on its engine)", e.id, home.id)
	}
	if e := r.pickEngine(p, ""); e == home {
		t.Errorf("keyless request went to the full engine %s", e.id)
	}
	r.queueWhenFull = false // the live pylon's rule: full moves the key
	if e := r.pickEngine(p, key); e == home {
		t.Errorf("spill mode: full home %s still picked", home.id)
	}
}

// With engine affinity off the pylon takes the least outstanding engine,
// ties round robin from after its last pick, whatever the key.
func TestPylonEngineChoiceOff(t *testing.T) {
	r := newIdleRunner(t, pylonFleet(3, 4, EngineAffinityOff))
	p := r.pylons[0]
	var got []string
	for range 4 {
		got = append(got, r.pickEngine(p, "mt:v1:session:same").id)
	}
	want := []string{"c0/p0/e0", "c0/p0/e1", "c0/p0/e2", "c0/p0/e0"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("idle picks %v, want round robin %v", got, want)
	}
	hold(p.engines[1], 1)
	hold(p.engines[2], 1)
	if e := r.pickEngine(p, "mt:v1:session:same"); e != p.engines[0] {
		t.Errorf("picked %s, want the only idle engine", e.id)
	}
}

// End to end on one pylon of two engines: with affinity every turn of a
// session meets its cache (the hand-checked hits of TestHandCheckedSession:
// 1040 and 1200 tokens); with the pylon's least-outstanding rule the idle
// engines alternate and turn 2 misses.
func TestPylonAffinityKeepsSessionCache(t *testing.T) {
	w := openWorkload(t, oreq{0, "s", 1, 1000, 50}, oreq{5000, "s", 2, 100, 50}, oreq{10000, "s", 3, 100, 50})
	for _, tc := range []struct {
		mode   string
		cached []int
	}{{EngineAffinityOn, []int{0, 1040, 1200}}, {EngineAffinityOff, []int{0, 0, 1040}}} {
		f := pylonFleet(2, 25, tc.mode)
		r := runArm(t, prepare(t, w, f), f, builtin(t, "power-of-n"), Options{Seed: 1})
		for i, want := range tc.cached {
			if got := r.reqs[i].cached; got != want {
				t.Errorf("affinity %s: turn %d cached %d, want %d", tc.mode, i+1, got, want)
			}
		}
	}
}

// A pylon reports one snapshot for all its engines: queue fields, running
// requests, KV counters and slots summed, the input rate once for the
// pylon (seeded with the engines' cold rate times their number). A
// request counts as InputProcessing only from its response head, which
// the mock engine sends after prefill.
func TestPylonRegistrationAggregates(t *testing.T) {
	r := newIdleRunner(t, pylonFleet(2, 4, EngineAffinityOn))
	p := r.pylons[0]
	a, b := p.engines[0], p.engines[1]
	a.pending, a.queuedInput, a.liveInput = 1, 100, 100
	b.prefilling, b.firstToken, b.queuedInput, b.liveInput = 2, 1, 300, 300
	hold(b, 1)
	b.liveInput += 50
	st := r.registration(p).Models[r.p.Model].Stats
	if st.QueueSize != 4 || st.QueuedInputSize != 400 || st.NumRunningQueries != 5 || st.TotalQueryInputSize != 450 ||
		st.InputProcessingQueries != 1 || st.OutputGenerationQueries != 1 {
		t.Errorf("queue fields %+v", st)
	}
	if st.MaxEngineConcurrency != 8 || st.KVCacheCapacityTokens != 2*1_600_000 || st.LastMeanInputTPS != 2*64000 {
		t.Errorf("slots %d, KV capacity %d, input TPS %v; want 8, 3200000, 128000", st.MaxEngineConcurrency, st.KVCacheCapacityTokens, st.LastMeanInputTPS)
	}
}
