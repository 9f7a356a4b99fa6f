package loadgen

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const enginesBefore = `near-a mock_engine_kv_cache_blocks{model_name="dummy-model"} 0
near-a mock_engine_kv_cache_evicted_blocks_total{model_name="dummy-model"} 10
near-a vllm:prefix_cache_hits_total{model_name="dummy-model"} 100
near-a vllm:prefix_cache_queries_total{model_name="dummy-model"} 400
far-a mock_engine_kv_cache_evicted_blocks_total{model_name="dummy-model"} 0
`

const enginesAfter = `near-a mock_engine_kv_cache_blocks{model_name="dummy-model"} 90
near-a mock_engine_kv_cache_evicted_blocks_total{model_name="dummy-model"} 25
near-a vllm:prefix_cache_hits_total{model_name="dummy-model"} 300
near-a vllm:prefix_cache_queries_total{model_name="dummy-model"} 1000

far-a mock_engine_kv_cache_evicted_blocks_total{model_name="dummy-model"} 7
`

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadCountersDifferences: evictions and prefix-cache tokens are
// after − before summed over engines; escapes are by reason over models,
// from zero when there is no "before" hub file.
func TestReadCountersDifferences(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{EnginesBeforeFile: enginesBefore, EnginesAfterFile: enginesAfter, HubAfterFile: `hub stargate_session_escapes_total{model="a",reason="retry"} 2
hub stargate_session_escapes_total{model="b",reason="retry"} 1
hub stargate_session_escapes_total{model="a",reason="group_saturated"} 4
hub stargate_requests_total{model="a"} 99
`})
	c, err := ReadCounters(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := &Counters{Engines: 2, EvictedBlocks: 15 + 7, PrefixQueryTokens: 600, PrefixHitTokens: 200,
		Escapes: map[string]float64{"retry": 3, "group_saturated": 4}}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("counters %+v, want %+v", c, want)
	}
	if got := escapesText(c, "cluster_lost"); got != "0" {
		t.Errorf("a reason the hub exports no series for: %q, want 0", got)
	}
	// The hub's before file is subtracted.
	writeFiles(t, dir, map[string]string{HubBeforeFile: `hub stargate_session_escapes_total{model="a",reason="retry"} 2` + "\n"})
	if c, _ := ReadCounters(dir); c.Escapes["retry"] != 1 {
		t.Fatalf("escapes with a before file: %v", c.Escapes)
	}
}

// TestReadCountersWithoutTheHubSeries: a hub file without the escapes
// series, or no hub file at all, reads n/a, never an error.
func TestReadCountersWithoutTheHubSeries(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{EnginesAfterFile: enginesAfter})
	c, err := ReadCounters(dir)
	if err != nil || c == nil || c.Escapes != nil || escapesText(c, "retry") != "n/a" || escapesTotalText(c) != "n/a" || evictedText(c) != "32" {
		t.Fatalf("no hub file: %+v, %v", c, err)
	}
	writeFiles(t, dir, map[string]string{HubAfterFile: `hub stargate_requests_total{model="a"} 9` + "\n"})
	if c, err := ReadCounters(dir); err != nil || c.Escapes != nil {
		t.Fatalf("a hub without escapes: %+v, %v", c, err)
	}
	if c, err := ReadCounters(t.TempDir()); c != nil || err != nil {
		t.Fatalf("an empty folder: %+v, %v", c, err)
	}
	writeFiles(t, dir, map[string]string{EnginesBeforeFile: "near-a broken\n"})
	if _, err := ReadCounters(dir); err == nil || !strings.Contains(err.Error(), EnginesBeforeFile) {
		t.Fatalf("a damaged file: %v", err)
	}
}

func TestParseCountersRejects(t *testing.T) {
	for _, in := range []string{
		"near-a",
		"near-a name",
		"near-a name{a=\"x\"",
		"near-a name{a=\"x\"} ",
		"near-a name{a=\"x} 1",
		"near-a name{a=x} 1",
		"near-a name{a=\"x\" b=\"y\"} 1",
		"near-a name{a=\"\\q\"} 1",
		"near-a name  1",
		"near-a name one",
		" name 1",
	} {
		if s, err := ParseCounters(strings.NewReader(in)); err == nil {
			t.Errorf("%q parsed as %+v", in, s)
		}
	}
}

// FuzzParseCounters: whatever ParseCounters accepts survives FormatSample
// and a second parse unchanged, so the files loadgen writes (FormatSample)
// read back as they were written.
func FuzzParseCounters(f *testing.F) {
	f.Add(enginesBefore)
	f.Add(`hub stargate_session_escapes_total{model="a \"b\"\\",reason="x\ny"} 3`)
	f.Add("a b{} 1e+308\nc d -Inf\n")
	f.Add(`x y{a="",b="}"} NaN`)
	f.Fuzz(func(t *testing.T, in string) {
		samples, err := ParseCounters(strings.NewReader(in))
		if err != nil {
			return
		}
		var b strings.Builder
		for _, s := range samples {
			b.WriteString(FormatSample(s))
			b.WriteByte('\n')
		}
		again, err := ParseCounters(strings.NewReader(b.String()))
		if err != nil {
			t.Fatalf("a formatted sample does not parse: %v\n%s", err, b.String())
		}
		if len(again) != len(samples) {
			t.Fatalf("%d samples, %d after a round trip", len(samples), len(again))
		}
		for i := range samples {
			a, b := samples[i], again[i]
			if a.Source != b.Source || a.Name != b.Name || !reflect.DeepEqual(a.Labels, b.Labels) ||
				math.Float64bits(a.Value) != math.Float64bits(b.Value) && !(math.IsNaN(a.Value) && math.IsNaN(b.Value)) {
				t.Fatalf("sample %d: %+v became %+v", i, a, b)
			}
		}
	})
}
