package scaleout

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

// TestHubsAgreeWithoutSharedState asks each of three hubs directly, on an
// idle fleet, where 48 sessions go: every hub must pick the same cluster
// for the same session (the rankings are pinned hashes of the session's
// key and the cluster ids, salted by lb-config's seed, not per-hub state),
// and every hub must honour a returning session's hint, whichever hub got
// the turn that wrote it.
func TestHubsAgreeWithoutSharedState(t *testing.T) {
	st := startStack(t, 3, 1)
	ep := st.Endpoints()
	c := httpClient(t)
	clusters := fleet().ClusterIDs()
	first := map[string]int{}
	for i := range 48 {
		key := loadgen.AffinityKey(fmt.Sprintf("agree-%d", i))
		var chosen []string
		for _, hub := range ep.Hubs {
			chosen = append(chosen, ask(t, c, ep, hub, key, ""))
		}
		for j, cl := range chosen {
			if cl != chosen[0] {
				t.Errorf("session %d: %s chose %s, %s chose %s", i, ep.HubNames[0], chosen[0], ep.HubNames[j], cl)
			}
		}
		first[chosen[0]]++
		// The hint names a cluster the ranking did not put first; every
		// hub must send the returning session there.
		hint := clusters[(indexOf(clusters, chosen[0])+1+i%(len(clusters)-1))%len(clusters)]
		for j, hub := range ep.Hubs {
			if got := ask(t, c, ep, hub, key, hint); got != hint {
				t.Errorf("session %d with hint %s: %s chose %s", i, hint, ep.HubNames[j], got)
			}
		}
	}
	// A ranking that put every session on one cluster would agree
	// trivially; the weighted rendezvous spreads them.
	if len(first) < 2 {
		t.Errorf("every session ranked one cluster first: %v", first)
	}
	t.Logf("first choices over 48 sessions, identical on %d hubs: %v", len(ep.Hubs), first)
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// ask sends one small chat turn straight to hub, as the gateway would
// (its token, the session's affinity key and, when set, the last-cluster
// hint), and returns the cluster that served it.
func ask(t *testing.T, c *http.Client, ep stack.Endpoints, hub, key, lastCluster string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	body := `{"model":"` + fleet().Model + `","messages":[{"role":"user","content":"where do I go?"}],"max_tokens":2,"stream":true}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hub+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "text/event-stream")
	h.Set("Authorization", "Bearer "+ep.GatewayToken)
	h.Set(headers.RequestID, "agree-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	h.Set(headers.Model, fleet().Model)
	h.Set(headers.InputTokens, "8")
	h.Set(headers.OutputTokens, "2")
	h.Set(headers.CacheAffinityKey, key)
	if lastCluster != "" {
		h.Set(headers.StargateLastClusterID, lastCluster)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	text := drain(resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", hub, resp.StatusCode, text)
	}
	cl := resp.Header.Get(headers.StargateClusterID)
	if cl == "" {
		t.Fatalf("%s answered without %s", hub, headers.StargateClusterID)
	}
	return cl
}
