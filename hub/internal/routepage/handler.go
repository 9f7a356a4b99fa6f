package routepage

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/openai"
)

// maxFilterBytes bounds the model and region filters: longer values name
// nothing the hub holds.
const maxFilterBytes = 256

// Page serves the routing page and the JSON it polls.
type Page struct {
	HubID string
	Log   Records
	Fleet Fleet
	// Prefix returns the prefix index's numbers and whether any route
	// uses prompt prefixes.
	Prefix func() Prefix
	Clock  clock.Clock
}

// flowNames are the values of the flow parameter.
var flowNames = []string{FlowFirst, FlowStay, FlowEscape, FlowFollowed, FlowBounced, FlowMoved, FlowUnplaced}

// ParseQuery reads a view's filter from URL parameters: model, region,
// window_s, sessions, turns and flow, all optional. Numbers above their maximum
// are clamped (the view echoes what it used); a value that is not a
// positive integer is a 400 naming the parameter.
func ParseQuery(v url.Values) (Query, *openai.Error) {
	q := Query{Model: v.Get("model"), Region: v.Get("region"), WindowSeconds: DefaultWindowSeconds,
		Sessions: DefaultSessions, Turns: DefaultTurns}
	if len(q.Model) > maxFilterBytes {
		return q, openai.BadRequest("model", "invalid_value", "model is at most 256 bytes")
	}
	if len(q.Region) > maxFilterBytes {
		return q, openai.BadRequest("region", "invalid_value", "region is at most 256 bytes")
	}
	if q.Flow = v.Get("flow"); q.Flow != "" && !slices.Contains(flowNames, q.Flow) {
		return q, openai.BadRequest("flow", "invalid_value", "flow must be one of %s", strings.Join(flowNames, ", "))
	}
	for _, p := range []struct {
		name     string
		dst      *int
		min, max int
	}{
		{"window_s", &q.WindowSeconds, minWindowSeconds, MaxWindowSeconds},
		{"sessions", &q.Sessions, 1, MaxSessions},
		{"turns", &q.Turns, 1, MaxTurns},
	} {
		s := v.Get(p.name)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return q, openai.BadRequest(p.name, "invalid_value", "%s must be a positive integer", p.name)
		}
		*p.dst = min(max(n, p.min), p.max)
	}
	return q, nil
}

// ServeJSON answers GET /debug/routing with a View.
func (p *Page) ServeJSON(w http.ResponseWriter, r *http.Request) {
	q, oerr := ParseQuery(r.URL.Query())
	if oerr != nil {
		openai.WriteError(w, oerr)
		return
	}
	in := Input{HubID: p.HubID, Now: p.Clock.Now(), Query: q, Log: p.Log, Fleet: p.Fleet}
	if p.Prefix != nil {
		in.Prefix = p.Prefix()
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(Build(in)); err != nil {
		openai.WriteError(w, openai.Internal("encoding the routing view"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// contentSecurity keeps the page to its own files: no inline script or
// style, no other origin, and fetches only to this listener.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiFile is one embedded file of the page and its content type.
type uiFile struct{ name, contentType string }

// uiFiles maps the page's URL paths to its embedded files.
var uiFiles = map[string]uiFile{
	"/ui":          {"index.html", "text/html; charset=utf-8"},
	"/ui/":         {"index.html", "text/html; charset=utf-8"},
	"/ui/page.js":  {"page.js", "text/javascript; charset=utf-8"},
	"/ui/page.css": {"page.css", "text/css; charset=utf-8"},
}

// ServeUI answers GET /ui and its two assets. The files hold no data, so
// they need no token; the page asks for the admin token when the JSON
// needs one.
func (p *Page) ServeUI(w http.ResponseWriter, r *http.Request) {
	f, ok := uiFiles[r.URL.Path]
	if !ok {
		openai.WriteError(w, openai.NotFound("no page at %s", r.URL.Path))
		return
	}
	b, err := fs.ReadFile(assets, "assets/"+f.name)
	if err != nil {
		openai.WriteError(w, openai.Internal("reading the page"))
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.contentType)
	h.Set("Content-Security-Policy", contentSecurity)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
