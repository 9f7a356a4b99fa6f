package pagecheck

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// chromium is the browser the tests drive: $UIE2E_CHROMIUM or Debian's.
// Without it the tests of this file skip (make ui-e2e installs it).
func chromium(t *testing.T) string {
	t.Helper()
	path := os.Getenv("UIE2E_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no Chromium at %s (set UIE2E_CHROMIUM or install Debian's chromium): %v", path, err)
	}
	return path
}

// fakePage serves testdata/page.html, a stand-in that fills the DOM
// contract from its query string.
func fakePage(t *testing.T) *httptest.Server {
	t.Helper()
	page, err := os.ReadFile(filepath.Join("testdata", "page.html"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ui" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(page)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// quickSteps keep a failing case short: the fake page is complete 300 ms
// after it loads.
var quickSteps = steps{live: 5 * time.Second, content: 3 * time.Second, detail: 3 * time.Second, shot: 10 * time.Second}

func runFake(t *testing.T, query url.Values, clusters, prefer []string) (Result, string, error) {
	t.Helper()
	srv := fakePage(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{Chromium: chromium(t), URL: srv.URL + "/ui?" + query.Encode(), Out: out,
		Clusters: clusters, Prefer: prefer, Width: 800, Height: 600, steps: &quickSteps})
	return res, out, err
}

func TestRunPasses(t *testing.T) {
	// A page that re-renders every 10 ms often replaces the row between
	// the click's lookup and the click itself.
	q := url.Values{"clusters": {"near-a,far-a"}, "sessions": {"s1:first,stay;s2:first,escape,followed;s3:first,escape,followed"}, "every": {"10"}}
	res, out, err := runFake(t, q, []string{"far-a", "near-a"}, []string{"s9", "s3"})
	if err != nil {
		t.Fatal(err)
	}
	// s3 is preferred (the JSON named it) over s2, listed first.
	if res.Session != "s3" {
		t.Errorf("opened session %q, want s3", res.Session)
	}
	for _, p := range []string{res.PageShot, res.SessionShot} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG (%d bytes)", p, len(b))
		}
	}
	if _, err := os.Stat(filepath.Join(out, FailureShot)); err == nil {
		t.Errorf("a passing run wrote %s", FailureShot)
	}
}

func TestRunFails(t *testing.T) {
	for _, c := range []struct {
		name     string
		query    url.Values
		clusters []string
		want     []string
	}{
		{"missing cluster", url.Values{"clusters": {"near-a"}, "sessions": {"s1:escape,followed"}}, []string{"near-a", "far-b"},
			[]string{"missing [far-b]", "found [near-a]"}},
		{"no followed session", url.Values{"clusters": {"near-a"}, "sessions": {"s1:first,escape,stay"}}, []string{"near-a"},
			[]string{`data-flows has "escape" and "followed"`, "s1 [first escape stay]"}},
		{"uncaught exception", url.Values{"clusters": {"near-a"}, "sessions": {"s1:escape,followed"}, "throw": {"boom in the page"}}, []string{"near-a"},
			[]string{"expected no console errors", "boom in the page"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, out, err := runFake(t, c.query, c.clusters, nil)
			if err == nil {
				t.Fatal("passed")
			}
			t.Logf("the error: %v", err)
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, serr := os.Stat(filepath.Join(out, FailureShot)); serr != nil {
				t.Errorf("no %s after a failure: %v", FailureShot, serr)
			}
		})
	}
}

func TestRunNotFound(t *testing.T) {
	srv := fakePage(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := Run(ctx, Options{Chromium: chromium(t), URL: srv.URL + "/nope", Out: t.TempDir(), Width: 800, Height: 600, steps: &quickSteps})
	if err == nil || !strings.Contains(err.Error(), "expected HTTP 200, got 404") {
		t.Fatalf("got %v, want an HTTP 404 error", err)
	}
}
