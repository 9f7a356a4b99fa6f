package serve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestProbes(t *testing.T) {
	var r Readiness
	mux := http.NewServeMux()
	Probes(mux, &r)
	mux.HandleFunc("/", NotFound)
	get := func(path string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec
	}
	if rec := get("/healthz"); rec.Code != 200 {
		t.Fatalf("/healthz = %d", rec.Code)
	}
	if rec := get("/readyz"); rec.Code != 503 || !strings.Contains(rec.Body.String(), `"type":"overloaded_error"`) {
		t.Fatalf("/readyz before ready = %d %s", rec.Code, rec.Body)
	}
	r.Set(true)
	if rec := get("/readyz"); rec.Code != 200 {
		t.Fatalf("/readyz when ready = %d", rec.Code)
	}
	if rec := get("/v1/nope"); rec.Code != 404 || !strings.Contains(rec.Body.String(), `"code":"not_found"`) {
		t.Fatalf("unknown route = %d %s", rec.Code, rec.Body)
	}
}
