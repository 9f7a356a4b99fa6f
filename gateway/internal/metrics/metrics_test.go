package metrics

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSessionState: only the hub's three classes pass; anything else is
// none, so a label value is never taken from the wire.
func TestSessionState(t *testing.T) {
	for in, want := range map[string]string{
		"new": "new", "returning": "returning", "stale": "stale",
		"": "none", "none": "none", "NEW": "none", "returning ": "none", "stale,new": "none", "unclassified": "none",
	} {
		got := SessionState(in)
		if got != want {
			t.Errorf("SessionState(%q) = %q, want %q", in, got, want)
		}
		if !slices.Contains(SessionStates, got) {
			t.Errorf("SessionState(%q) = %q, not in SessionStates", in, got)
		}
	}
}

// TestSessionSeriesAtStart: the hint results exist at 0 before traffic;
// the series labelled by function_id appear with their first sample, like
// the gateway's other function_id series.
func TestSessionSeriesAtStart(t *testing.T) {
	m := New(prometheus.NewRegistry())
	if n := testutil.CollectAndCount(m.HintResults); n != len(HintResults) {
		t.Errorf("last_cluster_hint_results_total: %d series, want %d", n, len(HintResults))
	}
	for _, r := range HintResults {
		if v := testutil.ToFloat64(m.HintResults.WithLabelValues(r)); v != 0 {
			t.Errorf("last_cluster_hint_results_total{result=%s} = %v, want 0", r, v)
		}
	}
	for name, c := range map[string]prometheus.Collector{"session_requests_total": m.SessionRequests,
		"session_prompt_tokens_total": m.SessionPromptTokens, "session_first_token_seconds": m.SessionFirstToken} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("%s: %d series before traffic, want 0", name, n)
		}
	}
}

// TestHubRetriesAtStart: both retry reasons exist at 0 before traffic, so
// a rate over them is defined from the start.
func TestHubRetriesAtStart(t *testing.T) {
	m := New(prometheus.NewRegistry())
	if n := testutil.CollectAndCount(m.HubRetries); n != len(RetryReasons) {
		t.Errorf("hub_retries_total: %d series, want %d", n, len(RetryReasons))
	}
	if n := testutil.CollectAndCount(m.HubUp); n != 0 {
		t.Errorf("hub_up: %d series before any hub is known, want 0", n)
	}
}
