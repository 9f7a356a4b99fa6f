package citecheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Problem is one citation a reader cannot follow.
type Problem struct {
	File    string // slash-separated, relative to the root
	Line    int
	Message string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message) }

// skipDirs are never read: build output, results, VCS data and fuzz
// corpora (arbitrary bytes by design).
var skipDirs = map[string]bool{".git": true, "bin": true, "results": true, "bench-results": true,
	"testdata": true, "node_modules": true}

// checked reports whether a file is text a reader follows citations in.
func checked(name string) bool {
	switch path.Ext(name) {
	case ".go", ".md", ".sh", ".yml", ".yaml", ".json", ".tpl", ".txt", ".toml":
		return true
	}
	return name == "Makefile" || name == "Dockerfile" || strings.HasPrefix(name, "Dockerfile.")
}

// Check walks root and returns every problem, sorted by file and line.
func Check(root string) ([]Problem, error) {
	c := &checker{root: root, anchors: map[string]map[string]bool{}}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !checked(d.Name()) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return c.file(filepath.ToSlash(rel))
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(c.problems, func(a, b Problem) int {
		if a.File != b.File {
			return strings.Compare(a.File, b.File)
		}
		return a.Line - b.Line
	})
	return c.problems, nil
}

type checker struct {
	root     string
	anchors  map[string]map[string]bool // file (slash, from root) -> anchors; nil: not a file
	problems []Problem
}

var (
	// outside matches a path into the design notes kept beside the
	// repository: a relative path up into a folder named shared, or
	// shared's spec, notes or style guide.
	outside = regexp.MustCompile(`\.\./shared\b|\bshared/(spec|notes|style)\b`)
	// section matches a section sign with a number after it.
	section = regexp.MustCompile(`§\s*[0-9]`)
	// rfcBefore matches "RFC 9110 " (or "RFC 9110, ") ending just before a section sign.
	rfcBefore = regexp.MustCompile(`RFC\s*[0-9]+[ ,]*$`)
	// url matches an absolute URL, whose .md files are not ours to check.
	url = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s)>\]"'` + "`" + `]+`)
	// mdLink matches a Markdown link or image: its text, then its target.
	mdLink = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
	// mdMention matches a Markdown file name with an optional anchor.
	mdMention = regexp.MustCompile(`[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md(#[A-Za-z0-9_-]+)?\b`)
)

func (c *checker) report(file string, line int, format string, args ...any) {
	c.problems = append(c.problems, Problem{File: file, Line: line, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) file(rel string) error {
	data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	isMD, isGo := path.Ext(rel) == ".md", path.Ext(rel) == ".go"
	var comments map[int]string
	if isGo {
		comments = goComments(data)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		c.numbers(rel, n, sc.Text())
		switch {
		case !isGo:
			c.links(rel, n, sc.Text(), isMD)
		case comments[n] != "":
			// In Go, only comments cite: a file name in a string is data
			// (an output file a test writes, say).
			c.links(rel, n, comments[n], false)
		}
	}
	return sc.Err()
}

// goComments returns the text of src's comments by line. A file that does
// not scan yields what was read before the error; the compiler reports
// the rest.
func goComments(src []byte) map[int]string {
	out := map[int]string{}
	fset := token.NewFileSet()
	f := fset.AddFile("", fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(f, src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok != token.COMMENT {
			continue
		}
		line := fset.Position(pos).Line
		for i, l := range strings.Split(lit, "\n") {
			out[line+i] += l
		}
	}
}

// numbers applies the rules that hold in any text, strings included: no
// path into the design notes, no section numbers of documents that are not
// here.
func (c *checker) numbers(rel string, n int, text string) {
	if outside.MatchString(text) {
		c.report(rel, n, "links outside the repository: %q", outside.FindString(text))
	}
	for _, loc := range section.FindAllStringIndex(text, -1) {
		if !rfcBefore.MatchString(text[:loc[0]]) {
			c.report(rel, n, "cites a section number (%q) of a document that is not in the repository: cite docs/<file>.md#<anchor> or state the reason", text[loc[0]:loc[1]])
		}
	}
}

// links checks the Markdown files a text mentions or links.
func (c *checker) links(rel string, n int, text string, isMD bool) {
	text = url.ReplaceAllString(text, "")
	var links [][]int // spans of whole links: their text and target are checked as the link
	if isMD {
		for _, m := range mdLink.FindAllStringSubmatchIndex(text, -1) {
			links = append(links, m[:2])
			c.target(rel, n, text[m[4]:m[5]], path.Dir(rel))
		}
	}
	for _, m := range mdMention.FindAllStringIndex(text, -1) {
		inLink := slices.ContainsFunc(links, func(l []int) bool { return m[0] >= l[0] && m[1] <= l[1] })
		if inLink || generated[text[m[0]:m[1]]] || flagValue.MatchString(text[:m[0]]) {
			continue
		}
		c.mention(rel, n, text[m[0]:m[1]])
	}
}

// generated names the Markdown files our tools write into a results folder
// (loadgen's report and campaign summary): the docs describe them, they are
// not citations.
var generated = map[string]bool{"report.md": true, "summary.md": true}

// flagValue matches a command-line flag ending just before a mention: the
// mention is a file the command writes (--md out.md), not a citation.
var flagValue = regexp.MustCompile(`--[a-z][a-z0-9-]*[ =]$`)

// target checks a relative Markdown link, resolved against the linking
// file's directory.
func (c *checker) target(rel string, n int, t, dir string) {
	if strings.HasPrefix(t, "mailto:") {
		return
	}
	file, anchor, _ := strings.Cut(t, "#")
	if file == "" {
		file = rel
	} else {
		file = path.Clean(path.Join(dir, file))
	}
	if strings.HasPrefix(file, "../") {
		c.report(rel, n, "links outside the repository: %q", t)
		return
	}
	c.resolve(rel, n, t, []string{file}, anchor)
}

// mention checks a file name in running text: from the root first (the way
// code comments cite a document under docs/ with its anchor), then from the
// mentioning file's directory.
func (c *checker) mention(rel string, n int, m string) {
	file, anchor, _ := strings.Cut(m, "#")
	c.resolve(rel, n, m, []string{path.Clean(file), path.Clean(path.Join(path.Dir(rel), file))}, anchor)
}

func (c *checker) resolve(rel string, n int, cited string, candidates []string, anchor string) {
	for _, f := range candidates {
		anchors, ok := c.load(f)
		if !ok {
			continue
		}
		if anchor != "" && path.Ext(f) == ".md" && !anchors[anchor] {
			c.report(rel, n, "%q: %s has no heading with anchor #%s", cited, f, anchor)
		}
		return
	}
	c.report(rel, n, "%q is not a file of the repository", cited)
}

// load returns the anchors of a file, and whether it exists. Directories
// exist with no anchors.
func (c *checker) load(f string) (map[string]bool, bool) {
	if a, seen := c.anchors[f]; seen {
		return a, a != nil
	}
	if f == ".." || strings.HasPrefix(f, "../") {
		c.anchors[f] = nil
		return nil, false
	}
	full := filepath.Join(c.root, filepath.FromSlash(f))
	st, err := os.Stat(full) //nolint:gosec // G703: paths that leave the tree were refused above
	if err != nil {
		c.anchors[f] = nil
		return nil, false
	}
	a := map[string]bool{}
	if !st.IsDir() && path.Ext(f) == ".md" {
		if data, err := os.ReadFile(full); err == nil { //nolint:gosec // G304: as above
			a = Anchors(data)
		}
	}
	c.anchors[f] = a
	return a, true
}

var htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)

// Anchors returns the anchors GitHub gives a Markdown document: one per
// heading (see Slug; a repeated slug gets -1, -2, ...), plus explicit
// <a id="..."> and <a name="..."> anchors. Headings inside fenced code
// blocks do not count.
func Anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(md), "\n") {
		trimmed := strings.TrimSpace(line)
		if f := fenceOf(trimmed); f != "" {
			switch {
			case fence == "":
				fence = f
			case strings.HasPrefix(trimmed, fence) && strings.TrimLeft(trimmed, fence[:1]) == "":
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimLeft(line, "#")
		if len(line)-len(title) > 6 || (title != "" && title[0] != ' ' && title[0] != '\t') {
			continue
		}
		s := Slug(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(title), "#")))
		if k := seen[s]; k > 0 {
			out[s+"-"+strconv.Itoa(k)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// fenceOf returns the fence a line opens or closes (``` or ~~~, any
// longer run), or "".
func fenceOf(trimmed string) string {
	for _, ch := range []string{"`", "~"} {
		if strings.HasPrefix(trimmed, ch+ch+ch) {
			return strings.Repeat(ch, len(trimmed)-len(strings.TrimLeft(trimmed, ch)))
		}
	}
	return ""
}

// Slug is GitHub's anchor for a heading title: lower case, every character
// that is not a letter, digit, space, '-' or '_' dropped, spaces turned into
// '-'. Markdown emphasis and code marks are punctuation, so they drop out.
func Slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
