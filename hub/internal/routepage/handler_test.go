package routepage

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/pkg/clock"
)

func TestParseQuery(t *testing.T) {
	q, oerr := ParseQuery(url.Values{})
	if oerr != nil || q != (Query{WindowSeconds: DefaultWindowSeconds, Sessions: DefaultSessions, Turns: DefaultTurns}) {
		t.Fatalf("defaults %+v %v", q, oerr)
	}
	q, oerr = ParseQuery(url.Values{"model": {"m"}, "region": {"near"}, "window_s": {"99999"}, "sessions": {"7"}, "turns": {"1000"}})
	if oerr != nil || q != (Query{Model: "m", Region: "near", WindowSeconds: MaxWindowSeconds, Sessions: 7, Turns: MaxTurns}) {
		t.Fatalf("clamped %+v %v", q, oerr)
	}
	if q, _ = ParseQuery(url.Values{"window_s": {"1"}}); q.WindowSeconds != minWindowSeconds {
		t.Fatalf("window below the minimum: %d", q.WindowSeconds)
	}
	for _, bad := range []url.Values{
		{"window_s": {"ten"}}, {"sessions": {"0"}}, {"turns": {"-3"}}, {"sessions": {"1.5"}},
		{"model": {strings.Repeat("m", 257)}}, {"region": {strings.Repeat("r", 257)}},
		{"flow": {"sideways"}},
	} {
		_, oerr := ParseQuery(bad)
		var param string
		for k := range bad {
			param = k
		}
		if oerr == nil || oerr.Status != http.StatusBadRequest || oerr.Param != param {
			t.Errorf("%v: error %+v, want a 400 naming %s", bad, oerr, param)
		}
	}
}

func page() *Page {
	l := routelog.New(0)
	l.Append(turn("s", 1, "near-a", "", ""))
	return &Page{HubID: "hub-a", Log: l, Fleet: twoRegions(), Clock: clock.NewFake(now),
		Prefix: func() Prefix { return Prefix{Enabled: true, Index: PrefixIndex{Nodes: 3}} }}
}

func TestServeJSON(t *testing.T) {
	rec := httptest.NewRecorder()
	page().ServeJSON(rec, httptest.NewRequest(http.MethodGet, "/debug/routing?sessions=1&window_s=600", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("status %d headers %v", rec.Code, rec.Header())
	}
	var v View
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("the body is not a View: %v", err)
	}
	if v.Schema != Schema || v.Query.Sessions != 1 || v.Query.WindowSeconds != 600 || v.Records.InWindow != 1 ||
		len(v.Clusters) != 4 || !v.Prefix.Enabled || v.Prefix.Index.Nodes != 3 || v.Prefix.Tiers == nil {
		t.Fatalf("view %+v", v)
	}

	rec = httptest.NewRecorder()
	page().ServeJSON(rec, httptest.NewRequest(http.MethodGet, "/debug/routing?turns=x", nil))
	var body struct {
		Error struct{ Message, Type, Param, Code string } `json:"error"`
	}
	if rec.Code != http.StatusBadRequest || json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Error.Param != "turns" ||
		body.Error.Type == "" {
		t.Fatalf("bad query: %d %s", rec.Code, rec.Body)
	}
}

func TestServeUI(t *testing.T) {
	for path, ctype := range map[string]string{"/ui": "text/html", "/ui/": "text/html", "/ui/page.js": "text/javascript",
		"/ui/page.css": "text/css"} {
		rec := httptest.NewRecorder()
		page().ServeUI(rec, httptest.NewRequest(http.MethodGet, path, nil))
		h := rec.Header()
		if rec.Code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), ctype) || rec.Body.Len() == 0 {
			t.Errorf("%s: %d %q, %d bytes", path, rec.Code, h.Get("Content-Type"), rec.Body.Len())
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") ||
			!strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
			t.Errorf("%s: Content-Security-Policy %q", path, csp)
		}
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
	}
	rec := httptest.NewRecorder()
	page().ServeUI(rec, httptest.NewRequest(http.MethodGet, "/ui/../debug/state", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", rec.Code)
	}
}
