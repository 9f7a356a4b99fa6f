// Package metricsdoc reads the metric names docs/metrics.md documents: the
// first cell of every table row whose header's first column is "metric",
// and the wildcard families (`go_*`) the prose names.
package metricsdoc

import (
	"regexp"
	"strings"
)

// Doc is what the reference documents.
type Doc struct {
	// Names are the documented metric names in the order they appear.
	Names []string
	// Prefixes are families documented by a wildcard (`go_*` gives
	// "go_"): the runtime and process collectors, covered by one line.
	Prefixes []string
}

// Covers reports whether name is documented, by name or by a wildcard.
func (d Doc) Covers(name string) bool {
	for _, n := range d.Names {
		if n == name {
			return true
		}
	}
	for _, p := range d.Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

var (
	code     = regexp.MustCompile("`([^`]+)`")
	wildcard = regexp.MustCompile("`([a-z][a-z0-9_]*_)\\*`")
	// metricName is a Prometheus metric name (colons allowed, as vLLM's).
	metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
)

// Parse reads the Markdown of the metrics reference.
func Parse(md string) Doc {
	var d Doc
	seen := map[string]bool{}
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			d.Names = append(d.Names, n)
		}
	}
	inTable, fence := false, false
	for _, line := range strings.Split(md, "\n") {
		t := strings.TrimSpace(line)
		if strings.HasPrefix(t, "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		for _, m := range wildcard.FindAllStringSubmatch(t, -1) {
			d.Prefixes = append(d.Prefixes, m[1])
		}
		if !strings.HasPrefix(t, "|") {
			inTable = false
			continue
		}
		cells := strings.Split(strings.Trim(t, "|"), "|")
		first := strings.TrimSpace(cells[0])
		switch {
		case strings.EqualFold(first, "metric"):
			inTable = true
			continue
		case !inTable || strings.HasPrefix(first, "---"):
			continue
		}
		for _, n := range names(first) {
			add(n)
		}
	}
	return d
}

// names expands a metric cell: "`a`, `b`" and "`a` / `b`" list names;
// "`x_capacity_tokens`, `_used_tokens`" abbreviates siblings of the
// previous full name that differ in as many trailing words as the
// abbreviation has.
func names(cell string) []string {
	var out []string
	prev := ""
	for _, m := range code.FindAllStringSubmatch(cell, -1) {
		tok := m[1]
		if strings.HasPrefix(tok, "_") && prev != "" {
			words := strings.Split(prev, "_")
			n := strings.Count(tok, "_")
			if n < len(words) {
				out = append(out, strings.Join(words[:len(words)-n], "_")+tok)
			}
			continue
		}
		if metricName.MatchString(tok) {
			out = append(out, tok)
			prev = tok
		}
	}
	return out
}
