package routeview

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Schema is the layout version of /debug/routing this reader knows.
const Schema = "stargate.routing-page/v1"

// The turn flows the test looks for (Turn.Flow).
const (
	FlowEscape   = "escape"
	FlowFollowed = "followed"
)

// View is the part of GET /debug/routing the test reads.
type View struct {
	Schema   string    `json:"schema"`
	HubID    string    `json:"hub_id"`
	Clusters []Cluster `json:"clusters"`
	Sessions Sessions  `json:"sessions"`
	Prefix   Prefix    `json:"prefix"`
}

// Prefix is the content-prefix part of the view.
type Prefix struct {
	Enabled bool `json:"enabled"`
	Hottest []struct {
		Prefix   string `json:"prefix"`
		Requests int    `json:"requests"`
	} `json:"hottest"`
}

// CheckPrefix says what the view lacks for the content-prefix panel: a
// route that used prompt prefixes, and a hot prefix to list.
func (v *View) CheckPrefix() error {
	if !v.Prefix.Enabled || len(v.Prefix.Hottest) == 0 {
		return fmt.Errorf("prefix: expected enabled with a hot prefix; found enabled %v and %d hot prefixes", v.Prefix.Enabled, len(v.Prefix.Hottest))
	}
	return nil
}

// Cluster is one cluster card's data.
type Cluster struct {
	ClusterID string `json:"cluster_id"`
	Region    string `json:"region"`
	Health    string `json:"health"`
}

// Sessions is the list of the window's sessions.
type Sessions struct {
	Total int       `json:"total"`
	Items []Session `json:"items"`
}

// Session is one session and its turns, oldest first.
type Session struct {
	ID    string `json:"id"`
	Turns []Turn `json:"turns"`
}

// Turn is one request of a session.
type Turn struct {
	ClusterID string `json:"cluster_id"`
	Flow      string `json:"flow"`
}

// DecodeView reads a /debug/routing body and checks its schema.
func DecodeView(body []byte) (*View, error) {
	var v View
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("decoding /debug/routing: %w", err)
	}
	if v.Schema != Schema {
		return nil, fmt.Errorf("/debug/routing has schema %q, expected %q", v.Schema, Schema)
	}
	return &v, nil
}

// ExpectedClusters reads a /debug/state body: the cluster ids of every
// target of the hub's routing state, sorted and distinct.
func ExpectedClusters(body []byte) ([]string, error) {
	var st struct {
		Routing *struct {
			Targets []struct {
				Clusters []struct {
					ClusterID string `json:"cluster_id"`
				} `json:"clusters"`
			} `json:"targets"`
		} `json:"routing"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("decoding /debug/state: %w", err)
	}
	if st.Routing == nil {
		return nil, errors.New("/debug/state has no routing object")
	}
	ids := map[string]bool{}
	for _, t := range st.Routing.Targets {
		for _, c := range t.Clusters {
			if c.ClusterID != "" {
				ids[c.ClusterID] = true
			}
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("/debug/state lists no cluster in routing.targets[].clusters (%d targets)", len(st.Routing.Targets))
	}
	return slices.Sorted(maps.Keys(ids)), nil
}

// FlowUnplaced is a turn no cluster answered; the hub relates the next
// placed turn to the one before it.
const FlowUnplaced = "unplaced"

// EscapedAndFollowed lists, in the view's order, the sessions with an
// escape turn whose next placed turn is a followed one: the session left
// its cluster and its next turn went where it had gone.
func (v *View) EscapedAndFollowed() []string {
	var out []string
	for _, s := range v.Sessions.Items {
		prev := ""
		for _, t := range s.Turns {
			if t.Flow == FlowUnplaced {
				continue
			}
			if prev == FlowEscape && t.Flow == FlowFollowed {
				out = append(out, s.ID)
				break
			}
			prev = t.Flow
		}
	}
	return out
}

// Check says what the view lacks for the browser test: a cluster of
// expected, or a session that escaped and followed. The error names what
// was expected and what was found.
func (v *View) Check(expected []string) error {
	var problems []string
	have := map[string]bool{}
	for _, c := range v.Clusters {
		have[c.ClusterID] = true
	}
	var missing []string
	for _, id := range expected {
		if !have[id] {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("clusters: expected %s (from /debug/state), missing %s; the view lists %s",
			list(expected), list(missing), list(v.clusterIDs())))
	}
	if len(v.EscapedAndFollowed()) == 0 {
		problems = append(problems, fmt.Sprintf("sessions: expected one with an %q turn whose next placed turn is %q; found none among %d listed (%d in the window), turn flows %s",
			FlowEscape, FlowFollowed, len(v.Sessions.Items), v.Sessions.Total, v.flowCounts()))
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}

func (v *View) clusterIDs() []string {
	ids := make([]string, 0, len(v.Clusters))
	for _, c := range v.Clusters {
		ids = append(ids, c.ClusterID)
	}
	return ids
}

// flowCounts is the listed turns counted by flow, e.g. "escape 3, first 20".
func (v *View) flowCounts() string {
	n := map[string]int{}
	for _, s := range v.Sessions.Items {
		for _, t := range s.Turns {
			n[t.Flow]++
		}
	}
	if len(n) == 0 {
		return "(no turns)"
	}
	parts := make([]string, 0, len(n))
	for _, f := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s %d", f, n[f]))
	}
	return strings.Join(parts, ", ")
}

// list formats ids for a message: [a b c], or [] when empty.
func list(ids []string) string {
	return "[" + strings.Join(ids, " ") + "]"
}
