package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/pkg/affinity"
)

// The built-in fleet survives a JSON round trip and validates, and it is
// the live benchmark fleet's shape: four clusters of two pylons of two
// BenchSlots-slot engines, pylons reporting every 250 ms and choosing engines by
// affinity key.
func TestDefaultFleetRoundTrip(t *testing.T) {
	b, err := json.Marshal(DefaultFleet())
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFleet(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Clusters) != 4 || len(f.Regions) != 2 || f.Pylon.IntervalMs != 250 || f.BlockTokens != 16 ||
		f.Pylon.EngineAffinity != EngineAffinityOn || f.Pylon.EngineAffinityLoadFactor != affinity.DefaultLoadFactor {
		t.Errorf("parsed fleet %+v", f)
	}
	for _, c := range f.Clusters {
		if p, e := c.layout(); p != 2 || e != 2 || c.Engine.MaxConcurrency != BenchSlots || c.Engine.KVCapacityTokens != BenchKVCapacityTokens {
			t.Errorf("cluster %s: %d pylons × %d engines, %d slots, %d KV tokens", c.ID, p, e, c.Engine.MaxConcurrency, c.Engine.KVCapacityTokens)
		}
	}
}

// bench/compare/sim-fleet.json, the fleet file routing-sim runs for a
// comparison with the live benchmark, is the built-in fleet: when one
// changes, regenerate the other with `routing-sim --print-fleet`.
func TestBenchFleetFileIsDefault(t *testing.T) {
	f, err := LoadFleet(filepath.Join("..", "..", "..", "bench", "compare", "sim-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(f)
	want, _ := json.Marshal(DefaultFleet().withDefaults())
	if string(got) != string(want) {
		t.Errorf("bench/compare/sim-fleet.json is not DefaultFleet (regenerate it with routing-sim --print-fleet):\n%s\n%s", got, want)
	}
}

// A bad fleet is refused with an error that names the field, and the
// older one-engine-per-pylon form still parses.
func TestParseFleetErrors(t *testing.T) {
	const regions = `"regions":[{"name":"r","rtt_ms":1}]`
	cluster := func(fields string) string {
		return `{` + regions + `,"clusters":[{"id":"a","region":"r",` + fields + `,"engine":{}}]}`
	}
	for _, tc := range []struct{ name, text, field string }{
		{"unknown field", `{` + regions + `,"clusters":[{"id":"a","region":"r","engines":1,"engine":{}}],"bogus":1}`, `"bogus"`},
		{"unknown cluster field", cluster(`"engines":1,"gpus":2`), `"gpus"`},
		{"no clusters", `{` + regions + `,"clusters":[]}`, "clusters"},
		{"unknown region", `{` + regions + `,"clusters":[{"id":"a","region":"x","engines":1,"engine":{}}]}`, "clusters[0] (a).region"},
		{"duplicate id", `{` + regions + `,"clusters":[{"id":"a","region":"r","engines":1,"engine":{}},{"id":"a","region":"r","engines":1,"engine":{}}]}`, "clusters[1].id"},
		{"no engines", cluster(`"engines":0`), "clusters[0] (a).pylons"},
		{"negative engines", cluster(`"engines":-1`), "clusters[0] (a).engines"},
		{"negative pylons", cluster(`"pylons":-1`), "clusters[0] (a).pylons"},
		{"negative engines per pylon", cluster(`"pylons":1,"engines_per_pylon":-2`), "clusters[0] (a).engines_per_pylon"},
		{"engines with pylons", cluster(`"engines":2,"pylons":2`), "clusters[0] (a).engines"},
		{"engines per pylon alone", cluster(`"engines_per_pylon":2`), "clusters[0] (a).pylons"},
		{"negative rate", `{` + regions + `,"clusters":[{"id":"a","region":"r","engines":1,"engine":{"prefill_tokens_per_s":-1}}]}`, "engine.prefill_tokens_per_s"},
		{"negative transit", `{"regions":[{"name":"r","rtt_ms":1,"transit_rtt_ms":-1}],"clusters":[{"id":"a","region":"r","engines":1,"engine":{}}]}`, "regions[0] (r).transit_rtt_ms"},
		{"bad affinity", `{` + regions + `,"clusters":[{"id":"a","region":"r","engines":1,"engine":{}}],"pylon":{"engine_affinity":"yes"}}`, "pylon.engine_affinity"},
		{"bad when-full rule", `{` + regions + `,"clusters":[{"id":"a","region":"r","engines":1,"engine":{}}],"pylon":{"engine_affinity_when_full":"wait"}}`, "pylon.engine_affinity_when_full"},
		{"small load factor", `{` + regions + `,"clusters":[{"id":"a","region":"r","engines":1,"engine":{}}],"pylon":{"engine_affinity_load_factor":0.5}}`, "pylon.engine_affinity_load_factor"},
	} {
		_, err := ParseFleet([]byte(tc.text))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.field)
		}
	}
	for text, want := range map[string][2]int{
		cluster(`"engines":3`):                      {3, 1},
		cluster(`"pylons":2`):                       {2, 1},
		cluster(`"pylons":2,"engines_per_pylon":3`): {2, 3},
	} {
		f, err := ParseFleet([]byte(text))
		if err != nil {
			t.Errorf("%s: %v", text, err)
			continue
		}
		if p, e := f.Clusters[0].layout(); p != want[0] || e != want[1] {
			t.Errorf("%s: %d pylons × %d engines, want %d × %d", text, p, e, want[0], want[1])
		}
		if f.Pylon.EngineAffinity != EngineAffinityOn || f.Pylon.EngineAffinityLoadFactor != affinity.DefaultLoadFactor {
			t.Errorf("%s: engine affinity %q factor %v, want on and pkg/affinity's default", text, f.Pylon.EngineAffinity, f.Pylon.EngineAffinityLoadFactor)
		}
	}
}

// Every built-in arm is a valid lb-config for the hub's own parser, and
// the --compare arms carry the campaign settings.
func TestBuiltinArmsParse(t *testing.T) {
	for _, name := range BuiltinArmNames() {
		a, ok := BuiltinArm(name)
		if !ok {
			t.Fatalf("%s: missing", name)
		}
		if a.GreedyTTFT {
			continue
		}
		cfg, err := lbconfig.Parse([]byte(replaceModel(string(a.Config), "m")))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		d, ok := cfg.Resolve("m", 0)
		if !ok {
			t.Fatalf("%s: no definition for the model", name)
		}
		e := d.Effective()
		if lca := strings.HasSuffix(name, "+lca"); e.LastClusterAffinity != lca {
			t.Errorf("%s: last_cluster_affinity %v", name, e.LastClusterAffinity)
		}
		if strings.Contains(name, "wait-and-widen") && (e.CacheAffinityWait.Milliseconds() != 200 || e.CacheAffinityInputTokensScale != 0.1 || e.MaxQueued != 1) {
			t.Errorf("%s: wait %v scale %v max_queued %d", name, e.CacheAffinityWait, e.CacheAffinityInputTokensScale, e.MaxQueued)
		}
	}
}

func TestParseArms(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mine.json")
	if err := os.WriteFile(path, []byte(`{"default":"random"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	arms, err := ParseArms("power-of-n, custom=" + path + "," + path + ",oracle")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range arms {
		names = append(names, a.Name)
	}
	if strings.Join(names, ",") != "power-of-n,custom,mine,greedy-ttft" || !arms[3].GreedyTTFT {
		t.Errorf("names %v", names)
	}
	if _, err := ParseArms("power-of-n,power-of-n"); err == nil {
		t.Error("a repeated arm was accepted")
	}
	if _, err := ParseArms("no-such-arm"); err == nil {
		t.Error("an unknown arm was accepted")
	}
	// A file arm runs through the hub's resolver like a built-in.
	f := equalFleet(2, 1, 25, 1)
	p := prepare(t, openWorkload(t, oreq{0, "", 1, 10, 1}, oreq{5, "", 1, 10, 1}), f)
	if _, err := Run(p, f, arms[1], Options{}); err != nil {
		t.Fatal(err)
	}
	bad := Arm{Name: "bad", Config: []byte(`{"models":{"$MODEL":{"algorithm":"power-of-n","last_cluster_affinity":true}}}`)}
	if _, err := Run(p, f, bad, Options{}); err == nil || !strings.Contains(err.Error(), "last_cluster_affinity") {
		t.Errorf("an invalid lb-config gave %v", err)
	}
}

// A session whose turns are out of order cannot be rendered.
func TestPrepareRejectsTurnGaps(t *testing.T) {
	w := openWorkload(t, oreq{0, "s", 1, 10, 1}, oreq{1, "s", 3, 10, 1})
	if _, err := Prepare(w, "", 16); err == nil {
		t.Error("turn 3 after turn 1 was accepted")
	}
}
