package proxy

import (
	"net/http"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/dispatch"
	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routing"
	"github.com/stargate-router/stargate/pkg/headers"
)

// Every request that reaches the routing loop leaves one record as it
// ends: where it was answered, how the choice ranked, its session class
// and, with a 2xx from elsewhere, the escape.
func TestRecords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		hint   string
		prefer []string
		status int // the backend's answer (200 unless set)
		want   routelog.Request
	}{
		{name: "returning, stays", hint: "ca", prefer: []string{"ca", "cb"}, want: routelog.Request{Cluster: "ca", Hint: "ca",
			Class: routing.SessionReturning, Selection: routelog.SelectionPrimary, RankDepth: 1, Status: http.StatusOK}},
		{name: "returning, escapes", hint: "ca", prefer: []string{"none", "cb"}, want: routelog.Request{Cluster: "cb", Hint: "ca",
			Class: routing.SessionReturning, Selection: routelog.SelectionFallback, RankDepth: 3, Status: http.StatusOK,
			Escape: dispatch.EscapeGroupSaturated}},
		{name: "an error from elsewhere is no escape", hint: "ca", prefer: []string{"none", "cb"}, status: http.StatusBadRequest,
			want: routelog.Request{Cluster: "cb", Hint: "ca", Class: routing.SessionReturning, Selection: routelog.SelectionFallback,
				RankDepth: 3, Status: http.StatusBadRequest}},
		{name: "no cluster", prefer: []string{"none"}, want: routelog.Request{Class: routing.SessionNew,
			Status: http.StatusServiceUnavailable}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := routelog.New(0)
			h := newHarness(t, fixedResolver{lb.Route{Algorithm: "esc", Picker: &escapePicker{prefer: tc.prefer}, LastClusterAffinity: true}},
				func(c *Config) { c.Records = log })
			if tc.status != 0 {
				h.backends["b1"].handle(answer(tc.status))
			}
			hdr := escapeHeaders(tc.hint)
			hdr.Set(headers.MaxWaitMs, "1")
			resp, _ := h.do(hdr, chatBody)
			h.inflight.Wait()
			var got []routelog.Record
			log.Each(func(r *routelog.Record) bool { got = append(got, *r); return true })
			if len(got) != 1 {
				t.Fatalf("status %d: %d records, want 1", resp.StatusCode, len(got))
			}
			r := got[0]
			if r.Model != model || r.RoutingKey != rk || r.Algorithm != "esc" || r.Session == 0 || r.At.IsZero() {
				t.Errorf("identity of %+v", r)
			}
			w := tc.want
			if r.Cluster != w.Cluster || r.Hint != w.Hint || r.Class != w.Class || r.Selection != w.Selection ||
				r.RankDepth != w.RankDepth || r.Status != w.Status || r.Escape != w.Escape {
				t.Errorf("record\n got %+v\nwant %+v", r, w)
			}
		})
	}
}
