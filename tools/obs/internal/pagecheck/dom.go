package pagecheck

import (
	"fmt"
	"slices"
	"strings"
)

// snapshotJS reads, in one evaluation, every part of the page the checks
// look at, so a check sees one consistent state of a page that re-renders
// on each poll.
const snapshotJS = `(() => {
  const st = document.querySelector('#status');
  const attr = (e, n) => e.getAttribute(n) || '';
  return {
    state: st ? attr(st, 'data-state') : '',
    status_found: !!st,
    status_text: st ? st.textContent.trim().replace(/\s+/g, ' ').slice(0, 200) : '',
    clusters: [...document.querySelectorAll('#clusters [data-cluster-id]')].map(e => attr(e, 'data-cluster-id')),
    sessions: [...document.querySelectorAll('#sessions [data-session-id]')].map(e => ({id: attr(e, 'data-session-id'), flows: attr(e, 'data-flows')})),
    detail: [...document.querySelectorAll('#session-detail [data-turn]')].map(e => ({turn: attr(e, 'data-turn'), flow: attr(e, 'data-flow')})),
    controls: ['f-model', 'f-region', 'f-window', 'f-sessions', 'f-flow'].filter(id => document.getElementById(id)),
    prefix_enabled: (() => { const p = document.querySelector('#prefix'); return p ? attr(p, 'data-enabled') : ''; })(),
    hot_prefixes: document.querySelectorAll('#prefix-body tr[data-prefix]').length,
  };
})()`

// snapshot is what snapshotJS returns.
type snapshot struct {
	State       string `json:"state"`
	StatusFound bool   `json:"status_found"`
	StatusText  string `json:"status_text"`
	// Clusters are the data-cluster-id of the cards in #clusters.
	Clusters []string `json:"clusters"`
	Sessions []row    `json:"sessions"`
	// Detail are the turns #session-detail shows.
	Detail []turn `json:"detail"`
	// Controls are the ids of filterControls the page has.
	Controls []string `json:"controls"`
	// PrefixEnabled is #prefix's data-enabled; HotPrefixes counts the
	// rows of its hottest-prefix table.
	PrefixEnabled string `json:"prefix_enabled"`
	HotPrefixes   int    `json:"hot_prefixes"`
}

// filterControls are the page's filters, in the order snapshotJS lists
// them.
var filterControls = []string{"f-model", "f-region", "f-window", "f-sessions", "f-flow"}

// row is one row of #sessions.
type row struct {
	ID string `json:"id"`
	// Flows is the space-separated distinct flows of its turns.
	Flows string `json:"flows"`
}

// turn is one turn of #session-detail.
type turn struct {
	Turn string `json:"turn"`
	Flow string `json:"flow"`
}

// The flows the test looks for.
const (
	flowEscape   = "escape"
	flowFollowed = "followed"
)

// maxListed bounds how many rows or turns a message lists.
const maxListed = 12

// live checks that #status says the page shows live data.
func live(s snapshot) error {
	if !s.StatusFound {
		return fmt.Errorf(`expected #status[data-state="live"]; the page has no #status`)
	}
	if s.State != "live" {
		return fmt.Errorf(`expected #status[data-state="live"]; found data-state=%q (text %q)`, s.State, s.StatusText)
	}
	return nil
}

// clustersShown checks that every expected cluster has a card.
func clustersShown(s snapshot, expected []string) error {
	var missing []string
	for _, id := range expected {
		if !slices.Contains(s.Clusters, id) {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("expected a #clusters [data-cluster-id] card for each of %v; missing %v; found %v", expected, missing, s.Clusters)
	}
	return nil
}

// controlsShown checks that the page has every filter control.
func controlsShown(s snapshot) error {
	var missing []string
	for _, id := range filterControls {
		if !slices.Contains(s.Controls, id) {
			missing = append(missing, "#"+id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("expected the filter controls #%s; missing %v", strings.Join(filterControls, " #"), missing)
	}
	return nil
}

// followedRow picks the #sessions row of a session that escaped and
// followed: data-flows holds both flows. A row of prefer (the sessions the
// JSON showed escaping and following) comes first, in prefer's order.
func followedRow(s snapshot, prefer []string) (string, error) {
	var found []string
	for _, r := range s.Sessions {
		flows := strings.Fields(r.Flows)
		if slices.Contains(flows, flowEscape) && slices.Contains(flows, flowFollowed) {
			found = append(found, r.ID)
		}
	}
	for _, id := range prefer {
		if slices.Contains(found, id) {
			return id, nil
		}
	}
	if len(found) > 0 {
		return found[0], nil
	}
	listed := make([]string, 0, maxListed)
	for _, r := range s.Sessions[:min(len(s.Sessions), maxListed)] {
		listed = append(listed, fmt.Sprintf("%s [%s]", r.ID, r.Flows))
	}
	return "", fmt.Errorf(`expected a #sessions [data-session-id] row whose data-flows has %q and %q; found %d rows: %s`,
		flowEscape, flowFollowed, len(s.Sessions), strings.Join(listed, ", "))
}

// detailFollowed checks that #session-detail shows turns, one followed.
func detailFollowed(s snapshot) error {
	for _, t := range s.Detail {
		if t.Flow == flowFollowed {
			return nil
		}
	}
	listed := make([]string, 0, maxListed)
	for _, t := range s.Detail[:min(len(s.Detail), maxListed)] {
		listed = append(listed, t.Turn+":"+t.Flow)
	}
	return fmt.Errorf(`expected #session-detail [data-turn] elements, one with data-flow=%q; found %d: %s`,
		flowFollowed, len(s.Detail), strings.Join(listed, " "))
}

// prefixShown checks that the content-prefix panel says the index is in
// use and lists a hot prefix.
func prefixShown(s snapshot) error {
	if s.PrefixEnabled != "true" || s.HotPrefixes == 0 {
		return fmt.Errorf(`expected #prefix[data-enabled="true"] with #prefix-body tr[data-prefix] rows; found data-enabled=%q and %d rows`,
			s.PrefixEnabled, s.HotPrefixes)
	}
	return nil
}

// cssString quotes s as a CSS string, for an attribute selector.
func cssString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\a `).Replace(s) + `"`
}
