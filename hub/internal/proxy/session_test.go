package proxy

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/headers"
)

// x-stargate-session-state on relayed answers: the class of a classified
// request, 2xx or not; absent when the request was not classified or its
// route has no last_cluster_affinity; an upstream copy never passes for
// the hub's. The gateway labels its session metrics with it
// (docs/design/hub-request.md#session-classification).
func TestSessionStateHeader(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		session  routing.SessionState
		affinity bool // the route's last_cluster_affinity
		hint     string
		status   int    // the pylon's answer
		upstream string // an x-stargate-session-state the pylon sends
		want     []string
	}{
		{"new", routing.SessionNew, true, "", http.StatusOK, "", []string{"new"}},
		{"returning", routing.SessionReturning, true, "ca", http.StatusOK, "", []string{"returning"}},
		{"stale", routing.SessionStale, true, "gone", http.StatusOK, "", []string{"stale"}},
		{"relayed non-2xx", routing.SessionReturning, true, "ca", http.StatusBadRequest, "", []string{"returning"}},
		{"the hub's value over the pylon's", routing.SessionNew, true, "", http.StatusOK, "returning", []string{"new"}},
		{"unclassified", routing.SessionUnclassified, true, "", http.StatusOK, "", nil},
		{"unclassified drops the pylon's", routing.SessionUnclassified, true, "", http.StatusOK, "stale", nil},
		{"route without the feature", routing.SessionReturning, false, "ca", http.StatusOK, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wp := &waitingPicker{session: tc.session, group: 2, calls: make(chan pick, 100)}
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "wait-and-widen", Picker: wp, LastClusterAffinity: tc.affinity}})
			kv := []string{}
			if tc.upstream != "" {
				kv = append(kv, headers.StargateSessionState, tc.upstream)
			}
			for _, id := range []string{"a1", "a2"} {
				h.backends[id].handle(answer(tc.status, kv...))
			}
			hdr := validHeaders()
			hdr.Set(headers.CacheAffinityKey, "mt:v1:session:abc")
			if tc.hint != "" {
				hdr.Set(headers.StargateLastClusterID, tc.hint)
			}
			resp, body := h.do(hdr, chatBody)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if got := resp.Header.Values(headers.StargateSessionState); !slices.Equal(got, tc.want) {
				t.Errorf("x-stargate-session-state = %q, want %q", got, tc.want)
			}
			if got := resp.Header.Get(headers.StargateClusterID); got != "ca" {
				t.Errorf("x-stargate-cluster-id = %q, want ca", got)
			}
		})
	}
}

// The hub's own answers (here a 503 after every cluster failed) are not
// relayed from a cluster and carry no session state, even for a classified
// request.
func TestSessionStateNotOnHubAnswers(t *testing.T) {
	t.Parallel()
	wp := &waitingPicker{session: routing.SessionNew, group: 2, calls: make(chan pick, 100)}
	h := newHarness(t, fixedResolver{lb.Route{Algorithm: "wait-and-widen", Picker: wp, LastClusterAffinity: true}},
		func(c *Config) { c.MaxConnectRetries = 0 })
	h.backends["a1"].srv.Close()
	h.backends["a2"].srv.Close()
	hdr := validHeaders()
	hdr.Set(headers.CacheAffinityKey, "mt:v1:session:abc")
	resp, body := h.do(hdr, chatBody)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502: %s", resp.StatusCode, body)
	}
	if got, ok := resp.Header[http.CanonicalHeaderKey(headers.StargateSessionState)]; ok {
		t.Errorf("x-stargate-session-state = %q on the hub's own answer", got)
	}
}

// The header values are the hub's session labels, so the gateway's
// session_state and stargate_routing_session_selections_total's agree.
func TestSessionStateValuesMatchLabels(t *testing.T) {
	t.Parallel()
	for _, s := range []routing.SessionState{routing.SessionNew, routing.SessionReturning, routing.SessionStale} {
		if got := sessionStateValue(s); len(got) != 1 || got[0] != s.String() || cap(got) != 1 {
			t.Errorf("sessionStateValue(%v) = %q (cap %d), want [%q] with cap 1", s, got, cap(got), s.String())
		}
	}
	for _, s := range []routing.SessionState{routing.SessionUnclassified, routing.SessionStale + 1, 255} {
		if got := sessionStateValue(s); got != nil {
			t.Errorf("sessionStateValue(%d) = %q, want nil", s, got)
		}
	}
}

// Setting the session state costs no allocation: a classified answer's
// head allocates exactly what an unclassified one's does.
func TestSessionStateAddsNoAllocation(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 360)
	up := http.Header{"Content-Type": {"application/json"}, "Content-Length": {"360"}}
	p := &Proxy{}
	be := state.Backend{ID: "pylon", ClusterID: "pylon", URL: "http://127.0.0.1:18090"}
	allocs := func(s routing.SessionState) float64 {
		return testing.AllocsPerRun(200, func() {
			w := &countingWriter{h: make(http.Header, 8)}
			resp := &http.Response{StatusCode: http.StatusOK, Header: up, ContentLength: int64(len(body)),
				Body: io.NopCloser(bytes.NewReader(body))}
			if err := p.copyResponse(w, resp, "pylon", be, s); err != nil {
				t.Fatal(err)
			}
		})
	}
	base := allocs(routing.SessionUnclassified)
	for _, s := range []routing.SessionState{routing.SessionNew, routing.SessionReturning, routing.SessionStale} {
		if got := allocs(s); got != base {
			t.Errorf("%v: %v allocations, unclassified %v", s, got, base)
		}
	}
}
