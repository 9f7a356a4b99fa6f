package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/lbconfig"
)

// The built-in fleet survives a JSON round trip and validates.
func TestDefaultFleetRoundTrip(t *testing.T) {
	b, err := json.Marshal(DefaultFleet())
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFleet(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Clusters) != 4 || len(f.Regions) != 2 || f.Pylon.IntervalMs != 1000 || f.BlockTokens != 16 {
		t.Errorf("parsed fleet %+v", f)
	}
}

func TestParseFleetErrors(t *testing.T) {
	for name, text := range map[string]string{
		"unknown field":  `{"regions":[{"name":"r","rtt_ms":1}],"clusters":[{"id":"a","region":"r","engines":1,"engine":{}}],"bogus":1}`,
		"no clusters":    `{"regions":[{"name":"r","rtt_ms":1}],"clusters":[]}`,
		"unknown region": `{"regions":[{"name":"r","rtt_ms":1}],"clusters":[{"id":"a","region":"x","engines":1,"engine":{}}]}`,
		"duplicate id":   `{"regions":[{"name":"r","rtt_ms":1}],"clusters":[{"id":"a","region":"r","engines":1,"engine":{}},{"id":"a","region":"r","engines":1,"engine":{}}]}`,
		"no engines":     `{"regions":[{"name":"r","rtt_ms":1}],"clusters":[{"id":"a","region":"r","engines":0,"engine":{}}]}`,
		"negative rate":  `{"regions":[{"name":"r","rtt_ms":1}],"clusters":[{"id":"a","region":"r","engines":1,"engine":{"prefill_tokens_per_s":-1}}]}`,
	} {
		if _, err := ParseFleet([]byte(text)); err == nil {
			t.Errorf("%s: no error", name)
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
		if a.Oracle {
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
	if strings.Join(names, ",") != "power-of-n,custom,mine,oracle" {
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
