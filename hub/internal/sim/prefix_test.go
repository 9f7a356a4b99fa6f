package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/prefixhash"
	"github.com/stargate-router/stargate/pkg/workload"
)

// prefixed is a one-shot anonymous request opening with the shared prefix
// name (tokens long), as the shared-prefix suite writes them.
type prefixed struct {
	at           int64
	prefix       string
	prefixTokens int
	in, out      int
}

func prefixWorkload(t testing.TB, rs ...prefixed) *workload.Workload {
	t.Helper()
	w := &workload.Workload{Header: workload.Header{V: workload.Version, Suite: "test", Seed: 5, Model: "m", Mode: workload.ModeOpen}}
	for i, r := range rs {
		req := workload.Request{Index: i, AtMs: r.at, Turn: 1, Source: workload.SourceNone, Endpoint: "chat",
			NewInputTokens: r.in, OutputTokens: r.out, Prefix: r.prefix, PrefixTokens: r.prefixTokens}
		if err := req.Validate(&w.Header); err != nil {
			t.Fatal(err)
		}
		w.Requests = append(w.Requests, req)
	}
	return w
}

// gatewaySummary is what the gateway sends for a chat prompt: its
// Hasher over the prompt layout of the messages, in the gateway's
// geometry.
func gatewaySummary(msgs [][2]string) prefixhash.Summary {
	h := prefixhash.NewHasher(prefixhash.DefaultBlockTokens, prefixhash.DefaultCharsPerToken)
	for _, m := range msgs {
		prefixhash.WriteMessage(h, m[0], m[1])
	}
	return h.Summary()
}

// The summary the simulated gateway sends is the one the real gateway's
// Hasher makes of the same conversation (the system prefix, each user
// message and reply), turn after turn, and it stays in the gateway's
// 16-token geometry when the engines cut the prompt into 32-token blocks.
// The anchor key is the summary's, and only keyless requests are given
// payload keys: each turn of an anonymous conversation its own.
func TestSummaryMatchesGatewayHasher(t *testing.T) {
	const seed = 9
	w := &workload.Workload{Header: workload.Header{V: workload.Version, Suite: "test", Seed: seed, Model: "m", Mode: workload.ModeOpen}}
	for turn := 1; turn <= 3; turn++ {
		r := workload.Request{Index: turn - 1, AtMs: int64(turn) * 1000, Session: "anon-1", Turn: turn, Source: workload.SourceNone,
			Endpoint: "chat", NewInputTokens: 300 + turn, OutputTokens: 40}
		if turn == 1 {
			r.Prefix, r.PrefixTokens = "sys-a", 700
		}
		w.Requests = append(w.Requests, r)
	}
	for _, blockTokens := range []int{16, 32} {
		p, err := Prepare(w, "", blockTokens)
		if err != nil {
			t.Fatal(err)
		}
		msgs := [][2]string{{workload.PrefixRole, workload.PrefixText(seed, "sys-a", 700)}}
		keys := map[string]bool{}
		for i := range p.reqs {
			r, pr := &w.Requests[i], &p.reqs[i]
			msgs = append(msgs, [2]string{"user", workload.UserText(seed, "anon-1", r.Turn, r.NewInputTokens)})
			want := gatewaySummary(msgs)
			if !reflect.DeepEqual(pr.summary, want) {
				t.Fatalf("%d-token engines, turn %d: summary %+v, gateway's %+v", blockTokens, r.Turn, pr.summary, want)
			}
			if pr.anchor != prefixhash.AnchorKey(want) || !strings.HasPrefix(pr.anchor, prefixhash.AnchorKeyPrefix) {
				t.Errorf("turn %d: anchor %q, want %q", r.Turn, pr.anchor, prefixhash.AnchorKey(want))
			}
			if !strings.HasPrefix(pr.affinity, "mt:v1:payload:") || keys[pr.affinity] || pr.session != "" {
				t.Errorf("turn %d: affinity %q session %q, want a payload key of its own and no session", r.Turn, pr.affinity, pr.session)
			}
			keys[pr.affinity] = true
			msgs = append(msgs, [2]string{"assistant", workload.UserText(seed, "reply:anon-1", r.Turn, r.OutputTokens)})
		}
		// The prompt is the one the anchors compare: turns 2 and 3 extend
		// turn 1, which opens with the 700-token prefix.
		if got := p.reqs[0].tokens; got < 1000 {
			t.Errorf("%d-token engines: turn 1 is %d tokens, want the 700-token prefix and the message", blockTokens, got)
		}
		if a := p.reqs[0].anchor; a != p.reqs[1].anchor || a != p.reqs[2].anchor {
			t.Errorf("%d-token engines: the turns of one conversation have anchors %q, %q, %q", blockTokens, a, p.reqs[1].anchor, p.reqs[2].anchor)
		}
	}
}

// sharedPrefixArms are the arms TestPrefixAffinityBeatsWaitAndWiden
// compares: prefix-affinity against wait-and-widen without a session key
// to follow.
func sharedPrefixCompare(t *testing.T, w *workload.Workload, f Fleet, arms string) map[string]*ArmResult {
	t.Helper()
	p := prepare(t, w, f)
	list, err := ParseArms(arms)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Compare(p, f, list, Options{Seed: 3}, 2)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ArmResult{}
	for _, a := range rep.Arms {
		out[a.Name] = a
	}
	return out
}

// kvFleet is n one-engine clusters with a KV cache of kv tokens each.
func kvFleet(n int, kv int64) Fleet {
	f := equalFleet(n, 1, 8, 2)
	for i := range f.Clusters {
		f.Clusters[i].Engine.KVCapacityTokens = kv
	}
	return f
}

// A shared-prefix workload whose 16 system prompts (about 16k tokens)
// fit a quarter per engine but not all in one: wait-and-widen without a
// session key sends each request to its payload key's ring group, so
// every engine sees every prompt and evicts them in turn, while
// prefix-affinity keeps each prompt on the cluster that first served it.
// The margin is asked of the comparison, not of transcribed numbers. The
// tiers are counted for every request that carried a summary, the index
// holds the prompts' checkpoints, and nothing is refused.
func TestPrefixAffinityBeatsWaitAndWiden(t *testing.T) {
	w, err := workload.Generate(workload.SuiteSharedPrefix, workload.SuiteParams{Seed: 4, Rate: 4, Duration: 40 * time.Second,
		Prompts: 16, PromptTokens: 1000, FirstTokens: 60, OutputTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	res := sharedPrefixCompare(t, w, kvFleet(4, 6000), "wait-and-widen,prefix-affinity")
	ww, pa := res["wait-and-widen"], res["prefix-affinity"]
	t.Logf("cached of ceiling: wait-and-widen %.1f %%, prefix-affinity %.1f %%; copies per block %.2f / %.2f",
		ww.Cache.PctOfCeiling, pa.Cache.PctOfCeiling, ww.Prefix.Copies.Clusters, pa.Prefix.Copies.Clusters)
	if pa.Cache.PctOfCeiling < ww.Cache.PctOfCeiling+20 {
		t.Errorf("prefix-affinity caches %.1f %% of the ceiling, wait-and-widen %.1f %%: want a 20-point lead",
			pa.Cache.PctOfCeiling, ww.Cache.PctOfCeiling)
	}
	if pa.Prefix.Copies.Clusters >= ww.Prefix.Copies.Clusters {
		t.Errorf("copies per block: prefix-affinity %.2f, wait-and-widen %.2f; want fewer", pa.Prefix.Copies.Clusters, ww.Prefix.Copies.Clusters)
	}
	tiers := pa.Prefix.Tiers
	if tiers.Cache+tiers.Split+tiers.Overflow+tiers.Load != pa.Completed || tiers.Cache <= tiers.Load || tiers.Load < 1 {
		t.Errorf("prefix-affinity tiers %+v for %d completed requests", tiers, pa.Completed)
	}
	if ww.Prefix.Tiers != (PrefixTiers{}) || ww.Prefix.Index != nil {
		t.Errorf("wait-and-widen reports prefix tiers %+v and index %+v", ww.Prefix.Tiers, ww.Prefix.Index)
	}
	x := pa.Prefix.Index
	if x == nil || x.Nodes < 16 || x.Bytes <= 0 || x.Marks != uint64(tiers.Cache+tiers.Split+tiers.Load) || x.Lookups != uint64(pa.Completed) {
		t.Errorf("prefix index %+v after %d marking decisions and %d requests", x, tiers.Cache+tiers.Split+tiers.Load, pa.Completed)
	}
	if pa.Rejected != 0 || pa.PrematureRejections != 0 || ww.Rejected != 0 {
		t.Errorf("rejected: prefix-affinity %d (%d premature), wait-and-widen %d", pa.Rejected, pa.PrematureRejections, ww.Rejected)
	}
	s := pa.SideBySide
	if s.PrefixTiers["cache"] != tiers.Cache || s.PrefixIndexNodes != x.Nodes || s.CopiesPerBlock != pa.Prefix.Copies.Clusters {
		t.Errorf("side by side %+v does not repeat the prefix account", s)
	}
}

// engineOf is the engine a dispatched request ran on.
func engineOf(r *runner, i int) string {
	if e := r.reqs[i].engine; e != nil {
		return e.id
	}
	return ""
}

// Keyless requests that share their first 32 blocks take the backend and
// the engine of their prompt's anchor on a prefix-aware route, so a
// cluster of two pylons with two engines each caches the shared prefix
// once; their payload keys would spread them. A keyed request keeps its
// session key, and a route that does not read prefixes keeps the payload
// key.
func TestAnchorKeyChoosesBackendAndEngine(t *testing.T) {
	f := equalFleet(1, 0, 0, 1)
	f.Clusters[0].Engines, f.Clusters[0].Pylons, f.Clusters[0].EnginesPerPylon = 0, 2, 2
	f.Clusters[0].Engine.MaxConcurrency = 8
	var reqs []prefixed
	for i := range 8 {
		reqs = append(reqs, prefixed{at: int64(i) * 2000, prefix: "doc", prefixTokens: 800, in: 50 + i, out: 4})
	}
	p := prepare(t, prefixWorkload(t, reqs...), f)
	r := runArm(t, p, f, builtin(t, "prefix-affinity"), Options{Seed: 1})
	first := engineOf(r, 0)
	for i := range r.reqs {
		rs := &r.reqs[i]
		if rs.innerKey != rs.pr.anchor || rs.pr.anchor != r.reqs[0].pr.anchor {
			t.Fatalf("request %d: inner key %q, want the shared anchor %q", i, rs.innerKey, r.reqs[0].pr.anchor)
		}
		if got := engineOf(r, i); got != first {
			t.Errorf("request %d ran on %s, request 0 on %s: the anchor should keep one engine", i, got, first)
		}
		if i > 0 && rs.cached < 800 {
			t.Errorf("request %d: %d cached tokens, want the 800-token prefix", i, rs.cached)
		}
	}
	// Without prefix awareness the payload keys choose, and spread.
	r = runArm(t, p, f, builtin(t, "wait-and-widen"), Options{Seed: 1})
	engines := map[string]bool{}
	for i := range r.reqs {
		if r.reqs[i].innerKey != r.reqs[i].pr.affinity {
			t.Fatalf("wait-and-widen request %d: inner key %q, want its affinity key", i, r.reqs[i].innerKey)
		}
		engines[engineOf(r, i)] = true
	}
	if len(engines) < 2 {
		t.Errorf("payload keys put all 8 requests on %v", engines)
	}
	// A session key wins over the anchor.
	w := openWorkload(t, oreq{0, "s", 1, 1000, 4}, oreq{3000, "s", 2, 100, 4})
	p = prepare(t, w, f)
	r = runArm(t, p, f, builtin(t, "prefix-affinity+lca"), Options{Seed: 1})
	for i := range r.reqs {
		if rs := &r.reqs[i]; rs.innerKey != rs.pr.affinity || !strings.HasPrefix(rs.innerKey, "mt:v1:session:") {
			t.Errorf("keyed request %d: inner key %q, want its session key", i, rs.innerKey)
		}
	}
}

// The hub learns a holder when the cluster's 2xx headers reach it, which
// with the mock engine is after the prompt's prefill: a second request
// with the prompt that arrives while the first is still prefilling finds
// no holder (tier load), one that arrives after finds it (tier cache). The
// dispatch what-if marks at once.
func TestPrefixMarkedWhenHeadersArrive(t *testing.T) {
	f := equalFleet(2, 1, 8, 2)
	for i := range f.Clusters {
		f.Clusters[i].Engine.PrefillTPS = 2000 // 1000 tokens: 500 ms of prefill
	}
	w := prefixWorkload(t, prefixed{0, "p", 900, 100, 4}, prefixed{100, "p", 900, 100, 4}, prefixed{2000, "p", 900, 100, 4})
	p := prepare(t, w, f)
	for _, tc := range []struct {
		name string
		opts Options
		want []routing.PrefixTier
	}{
		{"headers", Options{Seed: 1}, []routing.PrefixTier{routing.PrefixTierLoad, routing.PrefixTierLoad, routing.PrefixTierCache}},
		{"dispatch", Options{Seed: 1, MarkPrefixAtDispatch: true}, []routing.PrefixTier{routing.PrefixTierLoad, routing.PrefixTierCache, routing.PrefixTierCache}},
	} {
		r := runArm(t, p, f, builtin(t, "prefix-affinity"), tc.opts)
		var got []routing.PrefixTier
		for i := range r.reqs {
			got = append(got, r.reqs[i].tier)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("mark at %s: tiers %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The cache tier's account compares what the index claimed with what the
// engines found. Marked when headers arrive, the third request goes to a
// holder whose engine has the prompt: everything the index said held is
// found. Marked at dispatch, the second request goes to the first one's
// cluster while that one is still in prefill: the index says held, the
// engine has nothing yet.
func TestCacheTierIndexHeld(t *testing.T) {
	f := equalFleet(2, 1, 8, 2)
	for i := range f.Clusters {
		f.Clusters[i].Engine.PrefillTPS = 2000
	}
	w := prefixWorkload(t, prefixed{0, "p", 900, 100, 4}, prefixed{100, "p", 900, 100, 4}, prefixed{2000, "p", 900, 100, 4})
	p := prepare(t, w, f)
	r := runArm(t, p, f, builtin(t, "prefix-affinity"), Options{Seed: 1})
	x := r.result().Prefix.CacheTier
	if x.HeldTokens == 0 || x.FoundTokens != x.HeldTokens || int(x.HeldTokens) != r.reqs[2].held {
		t.Errorf("headers: cache tier %+v, want the third request's held tokens (%d), all found", x, r.reqs[2].held)
	}
	r = runArm(t, p, f, builtin(t, "prefix-affinity"), Options{Seed: 1, MarkPrefixAtDispatch: true})
	if rs := r.reqs[1]; rs.tier != routing.PrefixTierCache || rs.held == 0 || rs.cached != 0 {
		t.Fatalf("dispatch: second request tier %v held %d cached %d, want cache, >0, 0", rs.tier, rs.held, rs.cached)
	}
	x = r.result().Prefix.CacheTier
	if want := int64(r.reqs[1].held + r.reqs[2].held); x.HeldTokens != want || x.FoundTokens >= x.HeldTokens {
		t.Errorf("dispatch: cache tier %+v, want %d held and less found", x, want)
	}
}

// Copies per block: two requests with one prefix sent to two clusters
// leave the prefix's blocks on both, so the mean is above 1; sent to one
// cluster (prefix-affinity, the second request after the first's answer)
// every block has one copy, on one engine. By hand, in 64-byte blocks:
// each prompt is "system:" + 3600 B + "\n" (3608 B) then "user:" + 400 B
// + "\n", 4014 B: 62 blocks, the first 56 the prefix's alone, and a
// 46-byte tail. The one sample, at 10 s, sees both prompts (the replies
// stream for 12 s): 56 + 2·6 distinct blocks, 2·62 copies. At the end the
// replies ("assistant:" + 4800 B + "\n") have added 75 blocks each:
// 56 + 2·81 distinct blocks, 2·137 copies.
func TestCopiesPerBlock(t *testing.T) {
	f := equalFleet(2, 1, 8, 2)
	w := prefixWorkload(t, prefixed{0, "p", 900, 100, 1200}, prefixed{1500, "p", 900, 100, 1200})
	p := prepare(t, w, f)
	rr := runArm(t, p, f, Arm{Name: "rr", Config: []byte(`{"models":{"$MODEL":"round-robin"}}`)}, Options{Seed: 1})
	if rr.reqs[0].cluster == rr.reqs[1].cluster {
		t.Fatalf("round robin sent both requests to %s", rr.reqs[0].cluster)
	}
	c := rr.result().Prefix.Copies
	want := BlockCopies{Clusters: round3(2 * 62.0 / (56 + 2*6)), Engines: round3(2 * 62.0 / (56 + 2*6)),
		EndClusters: round3(2 * 137.0 / (56 + 2*81)), EndEngines: round3(2 * 137.0 / (56 + 2*81)), Samples: 1}
	if c != want {
		t.Errorf("round robin: copies %+v, want %+v", c, want)
	}
	c = runArm(t, p, f, builtin(t, "prefix-affinity"), Options{Seed: 1}).result().Prefix.Copies
	if want := (BlockCopies{Clusters: 1, Engines: 1, EndClusters: 1, EndEngines: 1, Samples: 1}); c != want {
		t.Errorf("prefix-affinity: copies %+v, want %+v", c, want)
	}
}

// A rejection is premature when some cluster had a free slot that no
// request on its way would take: input-work admission refuses on the
// hub's estimate while the engines idle; a fleet with every slot taken
// refuses without one.
func TestPrematureRejections(t *testing.T) {
	f := equalFleet(2, 1, 4, 1)
	cfg := Arm{Name: "admit", Config: []byte(`{"models":{"$MODEL":{"algorithm":"power-of-n","sample_count":2,"max_input_work_seconds":0.001}}}`)}
	p := prepare(t, openWorkload(t, oreq{0, "", 1, 2000, 4}, oreq{10, "", 1, 2000, 4}), f)
	res := runArm(t, p, f, cfg, Options{Seed: 1}).result()
	if res.Rejected == 0 || res.PrematureRejections != res.Rejected || res.SideBySide.PrematureRejections != res.Rejected {
		t.Errorf("admission with idle engines: %d rejected, %d premature (side by side %d), want all", res.Rejected,
			res.PrematureRejections, res.SideBySide.PrematureRejections)
	}
	f = equalFleet(2, 1, 1, 2)
	home := homeOf(t, f, "s")
	reqs := []oreq{{0, "s", 1, 500, 10}}
	for _, name := range fillers(t, f, home, 4) {
		reqs = append(reqs, oreq{500, name, 1, 200, 300})
	}
	p = prepare(t, openWorkload(t, append(reqs, oreq{1000, "s", 2, 100, 10})...), f)
	res = runArm(t, p, f, builtin(t, "pulsar-wait-and-widen+lca"), Options{Seed: 1}).result()
	if res.Rejected != 2 || res.PrematureRejections != 0 {
		t.Errorf("full fleet: %d rejected, %d premature, want 2 and 0", res.Rejected, res.PrematureRejections)
	}
}

// A ceiling that left out the prefix suites' openings would undercount
// what the simulator replays; the prefix suites' workloads are checked
// like the others.
func prefixSuiteWorkloads(t testing.TB) []*workload.Workload {
	t.Helper()
	var out []*workload.Workload
	for _, s := range []struct {
		suite string
		p     workload.SuiteParams
	}{
		{workload.SuiteSharedPrefix, workload.SuiteParams{Seed: 2, Duration: 4 * time.Second, Prompts: 4, Scale: 0.2}},
		{workload.SuiteRAG, workload.SuiteParams{Seed: 2, Duration: 6 * time.Second, Docs: 3, Scale: 0.2, FollowUps: 1}},
		{workload.SuiteAnonSessions, workload.SuiteParams{Seed: 2, Sessions: 20, Turns: 3, Scale: 0.2}},
		{workload.SuitePrefixMix, workload.SuiteParams{Seed: 2, Duration: 6 * time.Second, Prompts: 3, Docs: 2, Scale: 0.2}},
	} {
		w, err := workload.Generate(s.suite, s.p)
		if err != nil {
			t.Fatalf("%s: %v", s.suite, err)
		}
		out = append(out, w)
	}
	return out
}

// Every built-in prefix arm resolves to a route that reads prefixes, and
// the bench/compare arms of the prefix comparison are their base arms'
// files plus the one setting.
func TestPrefixArmsResolve(t *testing.T) {
	for _, name := range []string{"prefix-affinity", "prefix-affinity+lca", "wait-and-widen+prefix+lca", "pulsar-wait-and-widen+prefix+lca"} {
		h, err := newHub([]byte(replaceModel(string(builtin(t, name).Config), "m")), "m", Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !h.route.UsesPrefix || h.prefix == nil {
			t.Errorf("%s: route does not read prefixes", name)
		}
	}
	for _, name := range []string{"wait-and-widen+lca", "power-of-n"} {
		if h, err := newHub([]byte(replaceModel(string(builtin(t, name).Config), "m")), "m", Options{}); err != nil || h.prefix != nil {
			t.Errorf("%s: prefix index %v (err %v), want none", name, h.prefix, err)
		}
	}
	for _, c := range []struct{ file, base, add string }{
		{"ww-prefix.json", "ww-lca.json", `"prefix_affinity": true`},
		{"pww-prefix.json", "pww-lca.json", `"prefix_affinity": true`},
		{"prefix-affinity.json", "", `"last_cluster_affinity": true`},
	} {
		alg, got := benchEffective(t, c.file)
		if !got.PrefixAffinity && alg != lbconfig.PrefixAffinity {
			t.Errorf("%s: neither prefix-affinity nor prefix_affinity", c.file)
		}
		if !got.LastClusterAffinity {
			t.Errorf("%s: no last_cluster_affinity", c.file)
		}
		if c.base == "" {
			continue
		}
		baseAlg, want := benchEffective(t, c.base)
		got.PrefixAffinity = false
		if alg != baseAlg || !reflect.DeepEqual(got, want) {
			t.Errorf("%s is not %s plus %s:\n%+v\n%+v", c.file, c.base, c.add, *got, *want)
		}
	}
}

// benchEffective resolves bench/compare/name for the model the live
// campaign runs, as the hub's lbconfig does.
func benchEffective(t *testing.T, name string) (lbconfig.Algorithm, *lbconfig.Effective) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "bench", "compare", name))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := lbconfig.Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	d, ok := cfg.Resolve("dummy-model", 0)
	if !ok {
		t.Fatalf("%s: no definition for dummy-model", name)
	}
	return d.Algorithm(), d.Effective()
}

// blockSet counts distinct blocks and (block, cluster) pairs through
// probe chains (hashes that share their low bits) and across resets that
// reuse the table.
func TestBlockSet(t *testing.T) {
	var b blockSet
	for round := range 3 {
		b.reset(4)
		// Four hashes with equal low bits, two clusters: a and b on
		// cluster 0, b and c on cluster 1 (b twice there: two engines).
		a, bb, c := uint64(1)<<40, uint64(2)<<40, uint64(3)<<40
		for _, x := range []struct {
			h  uint64
			ci int32
		}{{a, 0}, {bb, 0}, {bb, 1}, {c, 1}, {bb, 1}} {
			b.add(x.h, x.ci)
		}
		if b.distinct != 3 || b.clusterCopies != 4 {
			t.Fatalf("round %d: %d distinct, %d cluster copies, want 3 and 4", round, b.distinct, b.clusterCopies)
		}
	}
	b.reset(100) // grows
	if len(b.slots) < 200 || b.distinct != 0 {
		t.Fatalf("after growing: %d slots, %d distinct", len(b.slots), b.distinct)
	}
}
