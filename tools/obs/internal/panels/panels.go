// Package panels reads dashboard JSON files as Grafana stores them and
// returns what the checks need: each panel's queries and each variable's
// query. It reads the committed files, not the Go definitions, so every
// check covers exactly what the chart ships.
package panels

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Target is one query of a panel.
type Target struct {
	RefID  string `json:"refId"`
	Expr   string `json:"expr"`
	Legend string `json:"legendFormat"`
}

// Panel is one panel: rows are flattened away.
type Panel struct {
	ID          int      `json:"id"`
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Targets     []Target `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			Unit string   `json:"unit"`
			Min  *float64 `json:"min"`
			Max  *float64 `json:"max"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	GridPos struct {
		W, H, X, Y int
	} `json:"gridPos"`
	Panels []Panel `json:"panels"` // a collapsed row's panels
}

// Unit is the panel's Grafana unit.
func (p Panel) Unit() string { return p.FieldConfig.Defaults.Unit }

// Variable is one template variable.
type Variable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// Dashboard is one file's dashboard.
type Dashboard struct {
	File       string
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// QueryPanels returns the panels that carry queries, in file order.
func (d Dashboard) QueryPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			if len(p.Targets) > 0 {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// VariableQueries returns the query of every query variable by name.
func (d Dashboard) VariableQueries() map[string]string {
	out := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		switch q := v.Query.(type) {
		case string:
			out[v.Name] = q
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				out[v.Name] = s
			}
		}
	}
	return out
}

// Load reads every *.json file of dir, sorted by name.
func Load(dir string) ([]Dashboard, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no dashboards (*.json) in %s", dir)
	}
	slices.Sort(files)
	var out []Dashboard
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // G304: files of the chart folder the caller names
		if err != nil {
			return nil, err
		}
		var d Dashboard
		if err := json.Unmarshal(data, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		d.File = filepath.Base(f)
		out = append(out, d)
	}
	return out, nil
}

// variableRef matches Grafana's $name and ${name} variable references.
var variableRef = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*\}|\$[A-Za-z_][A-Za-z0-9_]*`)

// Expand turns a panel expression into plain PromQL the way Grafana would
// with every variable at "All": $__rate_interval and the other interval
// variables become window, every other variable ".*" (the dashboards'
// All value, used only inside =~ matchers).
func Expand(expr, window string) string {
	return variableRef.ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		switch name {
		case "__rate_interval", "__interval", "__range":
			return window
		}
		return ".*"
	})
}

// LabelValuesQuery splits a variable query label_values(selector, label)
// into its selector and label; ok is false for any other query.
func LabelValuesQuery(q string) (selector, label string, ok bool) {
	q = strings.TrimSpace(q)
	if !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ")") {
		return "", "", false
	}
	inner := q[len("label_values(") : len(q)-1]
	i := strings.LastIndex(inner, ",")
	if i < 0 {
		return "", "", false
	}
	return strings.TrimSpace(inner[:i]), strings.TrimSpace(inner[i+1:]), true
}
