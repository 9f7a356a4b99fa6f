package stack

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestWriteSeries(t *testing.T) {
	exposition := `# HELP vllm:prefix_cache_hits_total Hits.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{model_name="m"} 1.5e+06
# TYPE mock_engine_kv_cache_blocks gauge
mock_engine_kv_cache_blocks{model_name="m",note="a \"b\" \\ c"} 12
# TYPE other untyped
other 3
# TYPE plain untyped
plain 0.25
`
	var b strings.Builder
	keep := func(name string) bool { return name != "other" }
	if err := writeSeries(&b, "x", strings.NewReader(exposition), keep); err != nil {
		t.Fatal(err)
	}
	want := `x mock_engine_kv_cache_blocks{model_name="m",note="a \"b\" \\ c"} 12
x plain 0.25
x vllm:prefix_cache_hits_total{model_name="m"} 1.5e+06
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	if err := writeSeries(&b, "x", strings.NewReader("not { metrics"), keep); err == nil {
		t.Error("no error for a broken exposition")
	}
}

// fakeEngines serves /metrics and the reset for every cluster of f from
// one server (the path's first element names the cluster), except down,
// whose requests fail with 500.
func fakeEngines(t *testing.T, f Fleet, down string) (*Stack, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var calls []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, path, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		mu.Lock()
		calls = append(calls, r.Method+" "+id+" /"+path)
		mu.Unlock()
		if id == down {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("vllm:prefix_cache_queries_total{model_name=\"dummy-model\"} 7\nvllm:request_success_total 3\n"))
	}))
	t.Cleanup(srv.Close)
	s := &Stack{fleet: f, http: srv.Client(), ep: Endpoints{Engines: map[string]string{}}}
	for _, id := range f.ClusterIDs() {
		s.ep.Engines[id] = srv.URL + "/" + id
	}
	return s, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
}

func TestResetCachesPostsToEveryEngine(t *testing.T) {
	s, calls := fakeEngines(t, LegacyBenchFleet(), "far-a")
	err := s.ResetCaches(t.Context())
	if err == nil || !strings.Contains(err.Error(), "resetting engine far-a") || strings.Contains(err.Error(), "near-a") {
		t.Errorf("err = %v, want far-a alone named", err)
	}
	want := []string{"POST near-a /test-control/kv-cache/reset", "POST near-b /test-control/kv-cache/reset",
		"POST far-a /test-control/kv-cache/reset", "POST far-b /test-control/kv-cache/reset"}
	if got := calls(); !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v", got, want)
	}
}

func TestWriteEngineCountersKeepsTheEnginesItCouldRead(t *testing.T) {
	s, _ := fakeEngines(t, LegacyBenchFleet(), "near-b")
	path := filepath.Join(t.TempDir(), "engines.txt")
	err := s.WriteEngineCounters(t.Context(), path)
	if err == nil || !strings.Contains(err.Error(), "engine near-b") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("err = %v, want near-b named", err)
	}
	b, _ := os.ReadFile(path)
	want := `near-a vllm:prefix_cache_queries_total{model_name="dummy-model"} 7
far-a vllm:prefix_cache_queries_total{model_name="dummy-model"} 7
far-b vllm:prefix_cache_queries_total{model_name="dummy-model"} 7
`
	if string(b) != want {
		t.Errorf("engines file:\n%s\nwant:\n%s", b, want)
	}
}
