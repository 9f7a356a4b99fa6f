// Package promql lists what a PromQL expression refers to: the metrics it
// selects with the label names its matchers use, and the labels each
// aggregation groups by. It is a small lexer, not a parser: promtool
// (Prometheus 2.42, the version Debian ships) checks the syntax of every
// expression in `make dashboards-check`; this package only has to find
// the names, and it refuses text it cannot tokenize or whose brackets do
// not balance. (Prometheus' own parser would add some hundred modules to
// compile for these few names.)
package promql

import (
	"fmt"
	"slices"
	"strings"
)

// Selector is one metric an expression selects and the label names its
// matchers use (the metric name excluded).
type Selector struct {
	Metric string
	Labels []string
}

// Grouping is one aggregation's by (...) labels and the metrics under
// it: each label must come from one of them (or from the scrape).
type Grouping struct {
	Labels  []string
	Metrics []string
}

// Refs is what an expression refers to.
type Refs struct {
	Selectors []Selector
	Groupings []Grouping
}

// Metrics returns the selected metric names, sorted and unique.
func (r Refs) Metrics() []string {
	var out []string
	for _, s := range r.Selectors {
		out = append(out, s.Metric)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// aggregations are PromQL's aggregation operators.
var aggregations = map[string]bool{"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true,
	"stdvar": true, "count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true}

// keywords are the other words that are never metric names.
var keywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
	"group_right": true, "offset": true, "bool": true, "and": true, "or": true, "unless": true, "atan2": true,
	"inf": true, "nan": true}

// labelLists are the words followed by a parenthesised list of labels.
var labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}

// Parse returns what expr refers to, or an error when it cannot be
// tokenized, its brackets do not balance or a matcher is malformed.
func Parse(expr string) (Refs, error) {
	toks, err := lex(expr)
	if err != nil {
		return Refs{}, err
	}
	if err := balanced(toks); err != nil {
		return Refs{}, err
	}
	var r Refs
	at := map[int]int{} // token index of a selector's first token -> index in r.Selectors
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.kind == ident && labelLists[strings.ToLower(t.text)]:
			if i+1 < len(toks) && toks[i+1].text == "(" {
				i = closing(toks, i+1) // skip the label list
			}
		case t.kind == ident && (keywords[strings.ToLower(t.text)] || aggregations[strings.ToLower(t.text)]):
		case t.kind == ident && i+1 < len(toks) && toks[i+1].text == "(":
			// a function call
		case t.kind == ident, t.text == "{":
			s, end, err := selector(toks, i)
			if err != nil {
				return Refs{}, err
			}
			at[i] = len(r.Selectors)
			r.Selectors = append(r.Selectors, s)
			i = end
		}
	}
	for i, t := range toks {
		if t.kind == ident && aggregations[strings.ToLower(t.text)] {
			if g, ok := grouping(toks, i, r.Selectors, at); ok {
				r.Groupings = append(r.Groupings, g)
			}
		}
	}
	return r, nil
}

// selector reads a vector selector starting at toks[i] (a name, a brace
// or both) and returns it and the index of its last token.
func selector(toks []token, i int) (Selector, int, error) {
	var s Selector
	if toks[i].kind == ident {
		s.Metric = toks[i].text
		if i+1 >= len(toks) || toks[i+1].text != "{" {
			return s, i, nil
		}
		i++
	}
	end := closing(toks, i)
	for j := i + 1; j < end; j += 4 {
		// name op "value" [,]
		if j+2 >= end+1 || toks[j].kind != ident || toks[j+1].kind != op || toks[j+2].kind != str {
			return s, 0, fmt.Errorf("malformed matcher at offset %d", toks[j].pos)
		}
		name, o, val := toks[j].text, toks[j+1].text, toks[j+2].text
		if o != "=" && o != "!=" && o != "=~" && o != "!~" {
			return s, 0, fmt.Errorf("matcher %s: operator %q", name, o)
		}
		if name == "__name__" {
			if s.Metric == "" && o == "=" {
				s.Metric = val
			}
		} else if !slices.Contains(s.Labels, name) {
			s.Labels = append(s.Labels, name)
		}
		if j+3 < end && toks[j+3].text != "," {
			return s, 0, fmt.Errorf("matcher %s: want ',' or '}' at offset %d", name, toks[j+3].pos)
		}
	}
	slices.Sort(s.Labels)
	return s, end, nil
}

// grouping reads the aggregation at toks[i]: `agg by (l) (body)` or
// `agg (body) by (l)`. Without a by list there is nothing to check.
func grouping(toks []token, i int, sels []Selector, at map[int]int) (Grouping, bool) {
	var labels []string
	bodyOpen := -1
	j := i + 1
	if j < len(toks) && isWord(toks[j], "by", "without") {
		labels = labelList(toks, j+1, strings.ToLower(toks[j].text) == "without")
		j = closing(toks, j+1) + 1
	}
	if j < len(toks) && toks[j].text == "(" {
		bodyOpen = j
		j = closing(toks, j) + 1
		if labels == nil && j < len(toks) && isWord(toks[j], "by", "without") {
			labels = labelList(toks, j+1, strings.ToLower(toks[j].text) == "without")
		}
	}
	if len(labels) == 0 || bodyOpen < 0 {
		return Grouping{}, false
	}
	g := Grouping{Labels: labels}
	end := closing(toks, bodyOpen)
	for k := bodyOpen; k < end; k++ {
		if n, ok := at[k]; ok {
			g.Metrics = append(g.Metrics, sels[n].Metric)
		}
	}
	slices.Sort(g.Metrics)
	g.Metrics = slices.Compact(g.Metrics)
	return g, true
}

// labelList returns the labels in the parentheses at toks[open]; nil for
// without (...), whose labels are removed, not kept.
func labelList(toks []token, open int, without bool) []string {
	if open >= len(toks) || toks[open].text != "(" || without {
		return nil
	}
	var out []string
	for k := open + 1; k < closing(toks, open); k++ {
		if toks[k].kind == ident {
			out = append(out, toks[k].text)
		}
	}
	return out
}

func isWord(t token, words ...string) bool {
	return t.kind == ident && slices.Contains(words, strings.ToLower(t.text))
}

// closing returns the index of the bracket closing toks[open] (the last
// token if it is never closed; balanced has refused that already).
func closing(toks []token, open int) int {
	depth := 0
	for k := open; k < len(toks); k++ {
		switch toks[k].text {
		case "(", "{", "[":
			depth++
		case ")", "}", "]":
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return len(toks) - 1
}

// balanced checks that brackets pair up.
func balanced(toks []token) error {
	var stack []token
	pairs := map[string]string{")": "(", "}": "{", "]": "["}
	for _, t := range toks {
		if t.kind != punct {
			continue
		}
		switch t.text {
		case "(", "{", "[":
			stack = append(stack, t)
		case ")", "}", "]":
			if len(stack) == 0 || stack[len(stack)-1].text != pairs[t.text] {
				return fmt.Errorf("unexpected %q at offset %d", t.text, t.pos)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %q at offset %d", stack[len(stack)-1].text, stack[len(stack)-1].pos)
	}
	return nil
}
