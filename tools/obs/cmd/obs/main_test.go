package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runObs(args ...string) (int, string) {
	var out bytes.Buffer
	code := run(context.Background(), args, &out, &out)
	return code, out.String()
}

func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"exprs"}, {"gen", "-bogus"}, {"gen", "extra"}} {
		if code, out := runObs(args...); code != 2 {
			t.Errorf("obs %v: exit %d, want 2\n%s", args, code, out)
		}
	}
	if code, _ := runObs("gen", "-h"); code != 0 {
		t.Errorf("obs gen -h: exit %d, want 0", code)
	}
}

func TestGenThenCheck(t *testing.T) {
	dir := t.TempDir()
	if code, out := runObs("gen", "-check", "-out", dir); code != 1 || !strings.Contains(out, "out of date") {
		t.Fatalf("check of an empty folder: exit %d\n%s", code, out)
	}
	if code, out := runObs("gen", "-out", dir); code != 0 {
		t.Fatalf("gen: exit %d\n%s", code, out)
	}
	if code, out := runObs("gen", "-check", "-out", dir); code != 0 || !strings.Contains(out, "4 files current") {
		t.Fatalf("check after gen: exit %d\n%s", code, out)
	}
}

func TestExprsWritesARuleFileOfTheChart(t *testing.T) {
	out := filepath.Join(t.TempDir(), "exprs.yaml")
	code, text := runObs("exprs", "-chart", filepath.Join("..", "..", "..", "..", "charts", "observability"), "-out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, text)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"record: obs_check:gateway:", "[5m]", "histogram_quantile"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("rule file lacks %q", want)
		}
	}
	if strings.Contains(string(data), "$") {
		t.Error("a dashboard variable was left unexpanded")
	}
}

func TestExprsNamesTheBadExpression(t *testing.T) {
	chart := t.TempDir()
	for _, d := range []string{"dashboards", "rules"} {
		if err := os.Mkdir(filepath.Join(chart, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	board := `{"uid": "x", "title": "X", "panels": [{"type": "timeseries", "id": 2, "title": "Broken", "targets": [{"refId": "A", "expr": "sum(rate(x[$__rate_interval])"}]}]}`
	rules := "groups:\n  - name: g\n    rules:\n      - record: a:b:c\n        expr: up\n"
	if err := os.WriteFile(filepath.Join(chart, "dashboards", "x.json"), []byte(board), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(chart, "rules", "r.yaml"), []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out := runObs("exprs", "-chart", chart, "-out", filepath.Join(chart, "out.yaml"))
	if code != 1 || !strings.Contains(out, `x.json: panel "Broken" (A)`) {
		t.Fatalf("exit %d\n%s", code, out)
	}
}
