package obs

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, LogConfig{Format: "json", Level: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON record: %q: %v", buf.String(), err)
	}
	if rec["msg"] != "shown" || rec["k"] != float64(1) {
		t.Fatalf("record = %v", rec)
	}
	for _, bad := range []LogConfig{{Format: "xml", Level: "info"}, {Format: "text", Level: "loud"}} {
		_, err := NewLogger(io.Discard, bad)
		if err == nil {
			t.Fatalf("%+v accepted", bad)
		}
		if !strings.Contains(err.Error(), "--log-") {
			t.Fatalf("error %q does not name the flag", err)
		}
	}
}

func TestRegistryServesBuildInfo(t *testing.T) {
	reg := NewRegistry()
	BuildInfo(reg, "hub", "v1.2.3")
	rec := httptest.NewRecorder()
	MetricsHandler(reg).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{`hub_build_info{version="v1.2.3"} 1`, "go_goroutines", "process_"} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestPprof(t *testing.T) {
	mux := http.NewServeMux()
	Pprof(mux)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/pprof/", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "goroutine") {
		t.Fatalf("/debug/pprof/ = %d", rec.Code)
	}
}

// TestMetricsMux: /metrics always, the profiler only when asked, and
// nothing else (the API has its own listener).
func TestMetricsMux(t *testing.T) {
	reg := NewRegistry()
	BuildInfo(reg, "pylon", "v1")
	for _, tc := range []struct {
		pprof bool
		path  string
		code  int
	}{
		{false, "/metrics", 200}, {false, "/debug/pprof/", 404}, {false, "/v1/models", 404},
		{true, "/metrics", 200}, {true, "/debug/pprof/", 200},
	} {
		rec := httptest.NewRecorder()
		MetricsMux(reg, tc.pprof).ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("pprof=%v GET %s = %d, want %d", tc.pprof, tc.path, rec.Code, tc.code)
		}
		if tc.path == "/metrics" && !strings.Contains(rec.Body.String(), `pylon_build_info{version="v1"} 1`) {
			t.Errorf("pprof=%v /metrics lacks the build info", tc.pprof)
		}
	}
}
