package envcheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func probed(names ...string) map[string]string {
	m := map[string]string{}
	for _, n := range names {
		m[n] = Probe(n)
	}
	return m
}

func TestCheckPassesAChartThatSetsEverything(t *testing.T) {
	in := Input{Chart: "c", Help: []string{"A_LISTEN", "A_LOG", "A_TTL"}, Allowed: []string{"A_LOG", "A_TTL"},
		Rendered: []string{"A_LISTEN", "A_LOG", "GOMEMLIMIT"}, Runtime: []string{"GOMEMLIMIT"},
		Probed: probed("A_LOG", "A_TTL")}
	if p := Check(in); len(p) != 0 {
		t.Fatalf("problems: %v", p)
	}
}

func TestCheckFindsEachKindOfGap(t *testing.T) {
	in := Input{Chart: "c",
		Help:     []string{"A_LISTEN", "A_NEW", "A_LOG", "A_SHADOW"},
		Allowed:  []string{"A_LOG", "A_GONE", "A_SHADOW", "A_LOST"},
		Rendered: []string{"A_LISTEN", "A_TYPO"},
		Probed:   map[string]string{"A_LOG": Probe("A_LOG"), "A_GONE": Probe("A_GONE"), "A_SHADOW": "fixed"},
	}
	got := strings.Join(Check(in), "\n")
	for _, want := range []string{
		"A_NEW (a flag of the binary) cannot be set",
		"allows config.A_GONE, which the binary does not know",
		"config.A_LOST does not reach",
		`config.A_SHADOW reaches the container as "fixed"`,
		"the templates set A_TYPO, which the binary does not know",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "A_LISTEN") {
		t.Errorf("A_LISTEN is wired by the templates, yet reported:\n%s", got)
	}
}

func TestSchemaConfigNames(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	direct := write("a.json", `{"properties":{"config":{"propertyNames":{"enum":["A","B"]}}}}`)
	if got, err := SchemaConfigNames(direct); err != nil || !slices.Equal(got, []string{"A", "B"}) {
		t.Fatalf("direct: %v %v", got, err)
	}
	ref := write("b.json", `{"$defs":{"cfg":{"propertyNames":{"enum":["X"]}}},"properties":{"config":{"$ref":"#/$defs/cfg"}}}`)
	if got, err := SchemaConfigNames(ref); err != nil || !slices.Equal(got, []string{"X"}) {
		t.Fatalf("ref: %v %v", got, err)
	}
	for name, body := range map[string]string{
		"none.json":     `{"properties":{}}`,
		"empty.json":    `{"properties":{"config":{"type":"object"}}}`,
		"unsorted.json": `{"properties":{"config":{"propertyNames":{"enum":["B","A"]}}}}`,
		"badref.json":   `{"properties":{"config":{"$ref":"other.json"}}}`,
	} {
		if _, err := SchemaConfigNames(write(name, body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
