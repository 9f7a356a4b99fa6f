package fences

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRulesHoldForTheRepository checks every rule against the real package
// graph of every module in go.work.
func TestRulesHoldForTheRepository(t *testing.T) {
	graph := repositoryGraph(t)
	for _, v := range Violations(graph, Rules) {
		t.Error(v)
	}
}

// TestEveryRuleConstrainsSomething guards against a rule that passes only
// because its packages were renamed or moved: each rule applies to at
// least one real package, and each Deny and Only pattern names at least
// one real package.
func TestEveryRuleConstrainsSomething(t *testing.T) {
	graph := repositoryGraph(t)
	exists := func(pattern string) bool {
		for pkg := range graph {
			if Match(pattern, pkg) {
				return true
			}
		}
		return false
	}
	for _, r := range Rules {
		if !slices.ContainsFunc(keys(graph), r.Applies) {
			t.Errorf("rule %q applies to no package", r.From)
		}
		for _, p := range append(slices.Clone(r.Deny), r.Only...) {
			if !exists(p) {
				t.Errorf("rule %q names %q, which matches no package", r.From, p)
			}
		}
	}
}

// TestForbiddenImportsAreCaught adds one forbidden dependency per rule to
// a small graph that obeys them all, and checks that the rule fires: the
// fixture proves no rule is vacuous.
func TestForbiddenImportsAreCaught(t *testing.T) {
	clean := map[string][]string{
		"gateway/internal/server": {"gateway/internal/answer", "pkg/headers"},
		"gateway/internal/answer": {"pkg/openai"},
		"hub/internal/lb/wnw":     {"hub/internal/lb", "hub/internal/routing", "pkg/protocol"},
		"hub/internal/dispatch":   {"hub/internal/lb", "hub/internal/routing", "pkg/protocol"},
		"hub/internal/proxy":      {"hub/internal/dispatch", "hub/internal/state", "pkg/headers"},
		"hub/cmd/hub":             {"hub/internal/proxy", "hub/internal/lbconfig"},
		"hub/internal/lbconfig":   {"hub/internal/lb", "hub/internal/routing"},
		"pylon/internal/tunnel":   {"pkg/protocol"},
	}
	if v := Violations(clean, Rules); len(v) > 0 {
		t.Fatalf("the clean fixture breaks rules:\n%s", strings.Join(v, "\n"))
	}
	for _, tc := range []struct {
		pkg, dep string
		rule     string // the Name of the fence that must fire
	}{
		{"gateway/internal/server", "hub/internal/routing", "gateway-apart"},
		{"hub/internal/proxy", "pylon/internal/tunnel", "hub-apart"},
		{"pylon/internal/tunnel", "gateway/internal/session", "pylon-apart"},
		{"pkg/headers", "hub/internal/routing", "pkg-leaf"},
		{"hub/internal/routing", "hub/internal/state", "routing-plain"},
		{"hub/internal/lb/wnw", "hub/internal/state", "lb-pure"},
		{"hub/internal/lb/wnw", "pkg/clock", "lb-pure"},
		{"hub/internal/dispatch", "hub/internal/lbconfig", "dispatch-pure"},
		{"hub/internal/state", "hub/internal/lb/pulsar", "state-owner"},
		{"hub/internal/lbconfig", "hub/internal/proxy", "config-below"},
		{"hub/internal/sim", "hub/internal/proxy", "proxy-top"},
		{"hub/internal/sim", "hub/internal/tunnel", "sim-offline"},
		{"pylon/internal/tunnel", "pylon/internal/engineproxy", "tunnel-carries"},
		{"pylon/internal/stats", "pylon/internal/engineproxy", "stats-fed"},
		{"gateway/internal/answer", "gateway/internal/server", "gateway-handlers-top"},
	} {
		g := map[string][]string{}
		for k, v := range clean {
			g[k] = slices.Clone(v)
		}
		g[tc.pkg] = append(g[tc.pkg], tc.dep)
		var reason string
		for _, r := range Rules {
			if r.Name == tc.rule {
				reason = r.Reason
			}
		}
		if reason == "" {
			t.Fatalf("no fence named %q", tc.rule)
		}
		want := tc.pkg + " imports " + tc.dep + " (fence " + tc.rule + ": " + reason + ")"
		if got := Violations(g, Rules); !slices.Contains(got, want) {
			t.Errorf("%s -> %s: got %q, want it to contain %q", tc.pkg, tc.dep, got, want)
		}
	}
}

// repositoryGraph returns every package of the workspace with its
// transitive dependencies inside the repository, both relative to Module.
func repositoryGraph(t *testing.T) map[string][]string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps=false", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`,
		"./pkg/...", "./gateway/...", "./hub/...", "./pylon/...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg, ok := strings.CutPrefix(fields[0], Module)
		if !ok {
			continue
		}
		var deps []string
		for _, d := range fields[1:] {
			if rel, ok := strings.CutPrefix(d, Module); ok {
				deps = append(deps, rel)
			}
		}
		graph[pkg] = deps
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(graph) < 20 {
		t.Fatalf("go list found only %d packages in %s", len(graph), root)
	}
	return graph
}

func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
