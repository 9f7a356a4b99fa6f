package panels

import (
	"os"
	"path/filepath"
	"testing"
)

func TestExpand(t *testing.T) {
	got := Expand(`sum(rate(x{a=~"$model", b=~"${cluster}"}[$__rate_interval]))`, "5m")
	want := `sum(rate(x{a=~".*", b=~".*"}[5m]))`
	if got != want {
		t.Fatalf("Expand = %s, want %s", got, want)
	}
}

func TestLabelValuesQuery(t *testing.T) {
	for _, c := range []struct {
		q, sel, label string
		ok            bool
	}{
		{`label_values(pylon_build_info{region=~"$region"}, cluster)`, `pylon_build_info{region=~"$region"}`, "cluster", true},
		{`label_values(up, job)`, "up", "job", true},
		{`query_result(up)`, "", "", false},
		{`label_values(up)`, "", "", false},
	} {
		sel, label, ok := LabelValuesQuery(c.q)
		if sel != c.sel || label != c.label || ok != c.ok {
			t.Errorf("LabelValuesQuery(%q) = %q, %q, %v; want %q, %q, %v", c.q, sel, label, ok, c.sel, c.label, c.ok)
		}
	}
}

func TestLoadFlattensRowsAndReadsVariables(t *testing.T) {
	dir := t.TempDir()
	const board = `{"uid": "u", "title": "T", "panels": [
		{"type": "row", "id": 1, "panels": [{"type": "timeseries", "id": 2, "title": "in row", "targets": [{"refId": "A", "expr": "up"}]}]},
		{"type": "stat", "id": 3, "title": "top", "targets": [{"refId": "A", "expr": "x"}, {"refId": "B", "expr": "y"}], "fieldConfig": {"defaults": {"unit": "s"}}},
		{"type": "text", "id": 4, "title": "no queries"}],
		"templating": {"list": [{"type": "datasource", "name": "ds", "query": "prometheus"},
			{"type": "query", "name": "a", "query": "label_values(up, job)"},
			{"type": "query", "name": "b", "query": {"query": "label_values(x, y)", "refId": "V"}}]}}`
	if err := os.WriteFile(filepath.Join(dir, "b.json"), []byte(board), 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].File != "b.json" || ds[0].UID != "u" {
		t.Fatalf("Load = %+v", ds)
	}
	ps := ds[0].QueryPanels()
	if len(ps) != 2 || ps[0].Title != "in row" || ps[1].Title != "top" || len(ps[1].Targets) != 2 || ps[1].Unit() != "s" {
		t.Fatalf("QueryPanels = %+v", ps)
	}
	vq := ds[0].VariableQueries()
	if len(vq) != 2 || vq["a"] != "label_values(up, job)" || vq["b"] != "label_values(x, y)" {
		t.Fatalf("VariableQueries = %v", vq)
	}
}

func TestLoadRefusesAnEmptyFolder(t *testing.T) {
	if _, err := Load(t.TempDir()); err == nil {
		t.Fatal("Load of an empty folder succeeded")
	}
}
