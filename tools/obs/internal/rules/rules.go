// Package rules reads Prometheus rule files and promtool rule-test files,
// so the checks can list every recording rule and alert, the metrics they
// use, and whether promtool tests cover each of them.
package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Rule is one recording rule or alert.
type Rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
	// Group and File say where the rule is.
	Group, File string `yaml:"-"`
}

// Name is the record or alert name.
func (r Rule) Name() string {
	if r.Alert != "" {
		return r.Alert
	}
	return r.Record
}

type file struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []Rule `yaml:"rules"`
	} `yaml:"groups"`
}

// Load reads every *.yaml rule file directly in dir (not its
// subfolders, where the tests live), in name order.
func Load(dir string) ([]Rule, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no rule files (*.yaml) in %s", dir)
	}
	slices.Sort(files)
	var out []Rule
	for _, f := range files {
		var rf file
		if err := decode(f, &rf); err != nil {
			return nil, err
		}
		for _, g := range rf.Groups {
			for _, r := range g.Rules {
				r.Group, r.File = g.Name, filepath.Base(f)
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// Tests is what promtool rule-test files cover.
type Tests struct {
	// Firing and Silent count the alert_rule_test cases per alert that
	// expect it to fire and to stay silent.
	Firing, Silent map[string]int
	// Exprs are the promql_expr_test expressions.
	Exprs []string
}

type testFile struct {
	Tests []struct {
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
		PromQLExprTest []struct {
			Expr string `yaml:"expr"`
		} `yaml:"promql_expr_test"`
	} `yaml:"tests"`
}

// LoadTests reads every *.yaml promtool test file in dir.
func LoadTests(dir string) (Tests, error) {
	t := Tests{Firing: map[string]int{}, Silent: map[string]int{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return t, err
	}
	if len(files) == 0 {
		return t, fmt.Errorf("no rule tests (*.yaml) in %s", dir)
	}
	for _, f := range files {
		var tf testFile
		if err := decode(f, &tf); err != nil {
			return t, err
		}
		for _, c := range tf.Tests {
			for _, a := range c.AlertRuleTest {
				if len(a.ExpAlerts) > 0 {
					t.Firing[a.Alertname]++
				} else {
					t.Silent[a.Alertname]++
				}
			}
			for _, e := range c.PromQLExprTest {
				t.Exprs = append(t.Exprs, e.Expr)
			}
		}
	}
	return t, nil
}

func decode(path string, v any) error {
	data, err := os.ReadFile(path) //nolint:gosec // G304: files of the chart folder the caller names
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
