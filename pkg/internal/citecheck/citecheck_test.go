package citecheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestSlug(t *testing.T) {
	for title, want := range map[string]string{
		"1. Connection lifecycle":                         "1-connection-lifecycle",
		"Hub ⇄ pylon protocol: the reverse HTTP/2 tunnel": "hub--pylon-protocol-the-reverse-http2-tunnel",
		"`x-routing-method`":                              "x-routing-method",
		"Load-balancer microbenchmark (2026-11-30)":       "load-balancer-microbenchmark-2026-11-30",
		"power-of-n":     "power-of-n",
		"Réseau _privé_": "réseau-_privé_",
	} {
		if got := Slug(title); got != want {
			t.Errorf("Slug(%q) = %q, want %q", title, got, want)
		}
	}
}

func TestAnchors(t *testing.T) {
	md := "# Title\n## Parse order\n## Parse order\n```\n## not a heading\n```\n#nohash\n<a id=\"custom\"></a>\n####### seven\n## Trailing ##\n"
	got := Anchors([]byte(md))
	for _, want := range []string{"title", "parse-order", "parse-order-1", "custom", "trailing"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	for _, unwanted := range []string{"not-a-heading", "nohash", "seven"} {
		if got[unwanted] {
			t.Errorf("anchor %q should not exist", unwanted)
		}
	}
}

// TestCheck runs the checker over a small tree with one line per rule,
// each either allowed or reported, and compares the exact problems.
func TestCheck(t *testing.T) {
	// The fixtures spell the patterns they test with placeholders, so this
	// file passes the check it tests: {S} is the section sign, {UP} the
	// path up into the design notes.
	spell := strings.NewReplacer("{S}", "\u00a7", "{UP}", "../"+"shared").Replace
	root := t.TempDir()
	write := func(name, text string) {
		text = spell(text)
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/a.md", "# A\n## Parse order\nSee [b](b.md), [top](../README.md), [here](#parse-order).\n"+
		"Broken: [c](c.md), [anchor](b.md#nope), [up](../../x.md).\n"+
		"Outside: [spec]({UP}/spec/hub.md) and hub.md {S}3.2.\n"+
		"Public: RFC 9110 {S}15.5 and RFC 8941, {S}3 also fine. Output: `report.md`, --md out.md.\n"+
		"Online: https://example.com/x.md#y.\n")
	write("docs/b.md", "# B\n")
	write("README.md", "# Readme\nRead [docs/a.md](docs/a.md#parse-order), [a.md](docs/a.md).\n")
	write("x/x.go", "package x\n\n// Follow docs/a.md#parse-order and README.md.\n"+
		"// Not docs/a.md#missing nor gateway.md.\n"+
		"var out = \"t.md\" // a file a test writes: data, not a citation\n"+
		"var msg = \"see {S}4\"\n"+
		"/* block: docs/b.md and\n   pylon.md */\n")
	write("testdata/skip.go", "// hub.md {S}1 in a fuzz corpus is not read\n")
	write("bin/skip.md", "{S}9\n")

	got, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range got {
		lines = append(lines, p.String())
	}
	want := []string{
		`docs/a.md:4: "c.md" is not a file of the repository`,
		`docs/a.md:4: "b.md#nope": docs/b.md has no heading with anchor #nope`,
		`docs/a.md:4: links outside the repository: "../../x.md"`,
		`docs/a.md:5: links outside the repository: "{UP}"`,
		`docs/a.md:5: cites a section number ("{S}3") of a document that is not in the repository: cite docs/<file>.md#<anchor> or state the reason`,
		`docs/a.md:5: "{UP}/spec/hub.md" is not a file of the repository`,
		`docs/a.md:5: "hub.md" is not a file of the repository`,
		`x/x.go:4: "docs/a.md#missing": docs/a.md has no heading with anchor #missing`,
		`x/x.go:4: "gateway.md" is not a file of the repository`,
		`x/x.go:6: cites a section number ("{S}4") of a document that is not in the repository: cite docs/<file>.md#<anchor> or state the reason`,
		`x/x.go:8: "pylon.md" is not a file of the repository`,
	}
	for i := range want {
		want[i] = spell(want[i])
	}
	if !slices.Equal(lines, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}
