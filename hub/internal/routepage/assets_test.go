package routepage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/html"
)

// The page's own files, as embedded.
func readAsset(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(assets, "assets/"+name)
	if err != nil {
		t.Fatalf("embedded asset %s: %v", name, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		t.Fatalf("embedded asset %s is empty", name)
	}
	return b
}

func TestAssetsAreEmbedded(t *testing.T) {
	for _, name := range []string{"index.html", "page.js", "page.css"} {
		readAsset(t, name)
	}
}

// TestPageLinksOnlyServedFiles checks that every file index.html loads is
// one ServeUI serves, so the page never asks for a 404.
func TestPageLinksOnlyServedFiles(t *testing.T) {
	refs := pageRefs(t, readAsset(t, "index.html"))
	if len(refs) < 2 {
		t.Fatalf("index.html loads %v; want the script and the style sheet", refs)
	}
	for _, ref := range refs {
		if _, ok := uiFiles[ref]; !ok {
			t.Errorf("index.html loads %q, which ServeUI does not serve", ref)
		}
	}
}

// pageRefs lists the src and href attributes of an HTML document.
func pageRefs(t *testing.T, page []byte) []string {
	t.Helper()
	var refs []string
	walkHTML(t, page, func(n *html.Node) {
		for _, a := range n.Attr {
			// The empty inline icon (data:,) loads nothing; without it a
			// browser asks for /favicon.ico, a 404 in its console.
			if (a.Key == "src" || a.Key == "href") && a.Val != emptyIcon {
				refs = append(refs, a.Val)
			}
		}
	})
	return refs
}

// emptyIcon is the page's icon: an empty data URL, fetched from nowhere.
const emptyIcon = "data:,"

func walkHTML(t *testing.T, page []byte, visit func(*html.Node)) {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("parsing index.html: %v", err)
	}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			visit(n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
}

// pageIDs returns the element ids of an HTML document and those given to
// more than one element.
func pageIDs(t *testing.T, page []byte) (ids map[string]bool, dups []string) {
	t.Helper()
	ids = map[string]bool{}
	walkHTML(t, page, func(n *html.Node) {
		for _, a := range n.Attr {
			if a.Key != "id" {
				continue
			}
			if ids[a.Val] {
				dups = append(dups, a.Val)
			}
			ids[a.Val] = true
		}
	})
	return ids, dups
}

// The script looks elements up by literal id only, through byId or the
// DOM's own calls, so these patterns find every id it needs.
var scriptIDPatterns = []*regexp.Regexp{
	regexp.MustCompile(`(?:byId|getElementById)\(\s*["']([^"']+)["']\s*\)`),
	regexp.MustCompile(`querySelector(?:All)?\(\s*["']#([A-Za-z][\w-]*)`),
}

func scriptIDs(js []byte) []string {
	var out []string
	for _, re := range scriptIDPatterns {
		for _, m := range re.FindAllSubmatch(js, -1) {
			out = append(out, string(m[1]))
		}
	}
	return out
}

// styleIDs returns the ids the style sheet's selectors name. Declaration
// blocks are dropped first, so colours like #fff are not taken for ids.
func styleIDs(css []byte) []string {
	noComments := regexp.MustCompile(`(?s)/\*.*?\*/`).ReplaceAll(css, nil)
	selectors := regexp.MustCompile(`(?s)\{[^{}]*\}`).ReplaceAll(noComments, []byte(" "))
	var out []string
	for _, m := range regexp.MustCompile(`#([A-Za-z][\w-]*)`).FindAllSubmatch(selectors, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

func missing(want []string, have map[string]bool) []string {
	var out []string
	for _, id := range want {
		if !have[id] && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// TestEveryLookedUpIDExists keeps page.js and page.css in step with
// index.html: an id the script looks up that the page lacks is a null the
// script would trip on.
func TestEveryLookedUpIDExists(t *testing.T) {
	ids, dups := pageIDs(t, readAsset(t, "index.html"))
	if len(dups) > 0 {
		t.Errorf("index.html gives ids %v to more than one element", dups)
	}
	fromJS := scriptIDs(readAsset(t, "page.js"))
	// The brief's contract ids: a rename breaks the lead's tests and the
	// SREs' bookmarks, so they are pinned here too.
	contract := []string{"hub-id", "scope", "status", "token", "f-model", "f-region", "f-window", "f-sessions", "f-flow",
		"clusters", "decisions", "timeline-chart", "sessions", "session-detail", "prefix"}
	if len(fromJS) < len(contract) {
		t.Fatalf("found only %d id lookups in page.js: the patterns no longer match how it looks ids up", len(fromJS))
	}
	if m := missing(fromJS, ids); len(m) > 0 {
		t.Errorf("page.js looks up ids index.html does not have: %v", m)
	}
	if m := missing(styleIDs(readAsset(t, "page.css")), ids); len(m) > 0 {
		t.Errorf("page.css styles ids index.html does not have: %v", m)
	}
	if m := missing(contract, ids); len(m) > 0 {
		t.Errorf("index.html lacks contract ids %v", m)
	}
}

func TestIDCheckersFindMissingIDs(t *testing.T) {
	ids, dups := pageIDs(t, []byte(`<p id="a"></p><p id="b"></p><p id="a"></p>`))
	if !reflect.DeepEqual(dups, []string{"a"}) {
		t.Errorf("duplicate ids = %v, want [a]", dups)
	}
	js := []byte(`byId("a"); document.getElementById('c'); document.querySelector("#d .x"); byId("a")`)
	if got := missing(scriptIDs(js), ids); !reflect.DeepEqual(got, []string{"c", "d"}) {
		t.Errorf("missing script ids = %v, want [c d]", got)
	}
	css := []byte(`/* #nope */ #b .x, #e > p { color: #fff; } .y { background: #abcdef }`)
	if got := missing(styleIDs(css), ids); !reflect.DeepEqual(got, []string{"e"}) {
		t.Errorf("missing style ids = %v, want [e]", got)
	}
}

// allowedURLs are the absolute URLs an asset may contain: the SVG
// namespace is a name the DOM needs to create SVG elements, never fetched.
var allowedURLs = []string{"http://www.w3.org/2000/svg"}

var (
	absoluteURL = regexp.MustCompile(`(?i)https?://[^\s"'` + "`" + `)]*`)
	// A protocol-relative URL starts a string, a url() or an attribute
	// value; a JavaScript comment never follows a quote, a parenthesis or
	// an equals sign directly.
	relativeProtocolURL = regexp.MustCompile(`(?:["'` + "`" + `(=])\s*//[^/\s*]`)
	cssImport           = regexp.MustCompile(`(?i)@import|url\(\s*["']?(?:[a-z]+:|//)`)
)

// externalRefs lists what in an asset could load something from outside
// the hub.
func externalRefs(b []byte) []string {
	var out []string
	for _, u := range absoluteURL.FindAll(b, -1) {
		if !slices.Contains(allowedURLs, string(u)) {
			out = append(out, string(u))
		}
	}
	for _, u := range relativeProtocolURL.FindAll(b, -1) {
		out = append(out, string(u))
	}
	for _, u := range cssImport.FindAll(b, -1) {
		if !strings.HasPrefix(strings.ToLower(string(u)), "url(data:") {
			out = append(out, string(u))
		}
	}
	return out
}

// TestAssetsLoadNothingFromElsewhere: the page must work on an admin
// listener with no way out (and its CSP would block the rest anyway).
func TestAssetsLoadNothingFromElsewhere(t *testing.T) {
	for _, name := range []string{"index.html", "page.js", "page.css"} {
		if refs := externalRefs(readAsset(t, name)); len(refs) > 0 {
			t.Errorf("%s refers outside the hub: %q", name, refs)
		}
	}
	for _, ref := range pageRefs(t, readAsset(t, "index.html")) {
		if !strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "//") {
			t.Errorf("index.html loads %q: want a path on the hub", ref)
		}
	}
}

func TestExternalRefsFindsURLs(t *testing.T) {
	for _, in := range []string{
		`<script src="https://cdn.example/x.js">`,
		`fetch("//evil.example/x")`,
		`<img src=//evil.example/x.png>`,
		`@import "x.css";`,
		`body { background: url(http://x/y.png) }`,
		`body { background: url("//x/y.png") }`,
		`font: url(https://fonts.example/f.woff2)`,
	} {
		if len(externalRefs([]byte(in))) == 0 {
			t.Errorf("externalRefs(%q) found nothing", in)
		}
	}
	for _, in := range []string{
		`// a comment`,
		`x = 1; // "quoted" in a comment`,
		`document.createElementNS("http://www.w3.org/2000/svg", "svg")`,
		`fetch("/debug/routing")`,
		`.x { background: url(data:image/png;base64,AAAA) }`,
	} {
		if got := externalRefs([]byte(in)); len(got) > 0 {
			t.Errorf("externalRefs(%q) = %q, want nothing", in, got)
		}
	}
}

// inlineCode lists what in an HTML page the CSP would block or what
// would run outside page.js: script bodies, style elements and
// attributes, event handler attributes and javascript: URLs.
func inlineCode(t *testing.T, page []byte) []string {
	t.Helper()
	var out []string
	walkHTML(t, page, func(n *html.Node) {
		switch n.Data {
		case "script":
			hasSrc := slices.ContainsFunc(n.Attr, func(a html.Attribute) bool { return a.Key == "src" })
			if !hasSrc || (n.FirstChild != nil && strings.TrimSpace(n.FirstChild.Data) != "") {
				out = append(out, "inline <script>")
			}
		case "style":
			out = append(out, "<style> element")
		}
		for _, a := range n.Attr {
			switch {
			case a.Key == "style":
				out = append(out, "style attribute on <"+n.Data+">")
			case strings.HasPrefix(a.Key, "on"):
				out = append(out, a.Key+" attribute on <"+n.Data+">")
			case strings.HasPrefix(strings.ToLower(strings.TrimSpace(a.Val)), "javascript:"):
				out = append(out, "javascript: URL on <"+n.Data+">")
			}
		}
	})
	return out
}

func TestPageHasNoInlineCode(t *testing.T) {
	if got := inlineCode(t, readAsset(t, "index.html")); len(got) > 0 {
		t.Errorf("index.html has %v", got)
	}
	bad := `<script>alert(1)</script><script src="/ui/page.js">x()</script><style>p{}</style>` +
		`<p style="color:red" onclick="x()"><a href="javascript:x()">x</a></p>`
	if got := inlineCode(t, []byte(bad)); len(got) != 6 {
		t.Errorf("inlineCode found %v in a page with six faults", got)
	}
}

// forbiddenInScript are the calls that would turn data into markup or
// code, or set styles the CSP blocks: every string the page shows comes
// from the network.
var forbiddenInScript = []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
	"new Function", `setAttribute("style"`, ".style.", "cssText"}

func TestScriptBuildsNoMarkupFromStrings(t *testing.T) {
	js := string(readAsset(t, "page.js"))
	for _, f := range forbiddenInScript {
		if strings.Contains(js, f) {
			t.Errorf("page.js uses %s", f)
		}
	}
}

// jsonNames collects the json names of every field reachable from typ.
func jsonNames(typ reflect.Type, into map[string]bool) {
	switch typ.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		jsonNames(typ.Elem(), into)
	case reflect.Struct:
		for i := range typ.NumField() {
			f := typ.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != "" && name != "-" {
				into[name] = true
			}
			jsonNames(f.Type, into)
		}
	}
}

// snakeProps are property reads like c.kv_used_tokens: the script names
// its own identifiers in camelCase, so every snake_case property is a
// field of the view.
var snakeProps = regexp.MustCompile(`\.([a-z][a-z0-9]*(?:_[a-z0-9]+)+)\b`)

// TestScriptReadsOnlyViewFields catches a misspelt or renamed field: the
// script would read undefined and draw a zero without any error.
func TestScriptReadsOnlyViewFields(t *testing.T) {
	names := map[string]bool{}
	jsonNames(reflect.TypeFor[View](), names)
	js := readAsset(t, "page.js")
	reads := snakeProps.FindAllSubmatch(js, -1)
	if len(reads) < 20 {
		t.Fatalf("found only %d snake_case reads in page.js: the pattern no longer matches", len(reads))
	}
	var unknown []string
	for _, m := range reads {
		if n := string(m[1]); !names[n] && !slices.Contains(unknown, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		t.Errorf("page.js reads fields View does not have: %v", unknown)
	}
}

// TestFixturesMatchView keeps the page's fixtures exact copies of the
// view's layout, so what the page is developed against is what the hub
// sends.
func TestFixturesMatchView(t *testing.T) {
	files, err := filepath.Glob("testdata/view*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := matchesView(raw); err != nil {
				t.Error(err)
			}
		})
	}
}

// matchesView reports how a JSON document differs from View's layout: a
// field View lacks, one of View's missing, or a value of another type.
// Decoding, re-encoding and comparing the two generic trees finds all
// three.
func matchesView(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var v View
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("decoding into View: %w", err)
	}
	if v.Schema != Schema {
		return fmt.Errorf("schema %q, want %q", v.Schema, Schema)
	}
	again, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var want, got any
	if err := json.Unmarshal(raw, &want); err != nil {
		return err
	}
	if err := json.Unmarshal(again, &got); err != nil {
		return err
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("not View's layout at %s", firstDiff(want, got))
	}
	return nil
}

func TestMatchesViewFindsDrift(t *testing.T) {
	raw, err := os.ReadFile("testdata/view-empty.json")
	if err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(map[string]any){
		"extra field":   func(m map[string]any) { m["extra"] = 1 },
		"missing field": func(m map[string]any) { delete(m, "hub_id") },
		"nested missing": func(m map[string]any) {
			delete(m["records"].(map[string]any), "window_covered")
		},
		"wrong type":  func(m map[string]any) { m["records"].(map[string]any)["capacity"] = "4096" },
		"schema bump": func(m map[string]any) { m["schema"] = "stargate.routing-page/v2" },
	} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		if matchesView(b) == nil {
			t.Errorf("%s: matchesView found nothing", name)
		}
	}
}

// firstDiff names the first path where a differs from b, for a readable
// failure.
func firstDiff(a, b any) string {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return "(not an object)"
		}
		for k, v := range x {
			if w, ok := y[k]; !ok {
				return k + " (only here)"
			} else if !reflect.DeepEqual(v, w) {
				return k + "." + firstDiff(v, w)
			}
		}
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return "(lengths differ)"
		}
		for i := range x {
			if !reflect.DeepEqual(x[i], y[i]) {
				return "[" + strconv.Itoa(i) + "]." + firstDiff(x[i], y[i])
			}
		}
	}
	b2, _ := json.Marshal(a)
	return string(b2)
}
