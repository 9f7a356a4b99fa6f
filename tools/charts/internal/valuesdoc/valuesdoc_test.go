package valuesdoc

import (
	"strings"
	"testing"
)

const values = `# A header comment of the file, not of a value.

# -- Pods.
replicaCount: 3

image:
  # -- Repository, with a
  # second line.
  repository: x/y
  # -- Tag | empty: appVersion.
  tag: ""

# -- Resources, one row.
resources:
  limits:
    memory: 512Mi
`

func TestRows(t *testing.T) {
	rows, err := Rows([]byte(values))
	if err != nil {
		t.Fatal(err)
	}
	got := Table(rows)
	want := "| value | default | meaning |\n| --- | --- | --- |\n" +
		"| `replicaCount` | `3` | Pods. |\n" +
		"| `image.repository` | `\"x/y\"` | Repository, with a second line. |\n" +
		"| `image.tag` | `\"\"` | Tag \\| empty: appVersion. |\n" +
		"| `resources` | `{\"limits\":{\"memory\":\"512Mi\"}}` | Resources, one row. |\n"
	if got != want {
		t.Fatalf("Table:\n%s\nwant:\n%s", got, want)
	}
}

func TestRowsRefusesAnUndocumentedValue(t *testing.T) {
	_, err := Rows([]byte("# -- ok\na: 1\nb:\n  c: 2\n"))
	if err == nil || !strings.Contains(err.Error(), `b.c (line 4) has no "# --" comment`) {
		t.Fatalf("err = %v", err)
	}
}

func TestSplice(t *testing.T) {
	doc := "intro\n<!-- values: charts/a -->\nold\n<!-- end values -->\nafter\n"
	got, err := Splice(doc, "charts/a", "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n<!-- values: charts/a -->\nnew\n<!-- end values -->\nafter\n"; got != want {
		t.Fatalf("Splice = %q", got)
	}
	if _, err := Splice(doc, "charts/b", "x"); err == nil {
		t.Fatal("Splice found a marker that is not there")
	}
}
