package pagecheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
)

// Flags are Chromium's switches, besides the fresh profile folder
// (--user-data-dir) and what chromedp itself adds to talk to the browser
// (--remote-debugging-pipe and about:blank as the first page). They keep
// a headless run quiet: no GPU, no sandbox (the test often runs as root in
// a container), and no background traffic (updates, sync, first-run pages)
// that could slow a run or reach the network.
var Flags = []string{
	"headless",
	"no-sandbox",
	"disable-gpu",
	"disable-background-networking",
	"disable-component-update",
	"disable-sync",
	"no-first-run",
}

// The screenshots Run writes into Options.Out, and Chromium's own output.
const (
	PageShot    = "routing-page.png"
	SessionShot = "routing-page-session.png"
	FailureShot = "routing-page-failure.png"
	ChromiumLog = "chromium.log"
)

// steps bound each step of a run.
type steps struct {
	live, content, detail, shot time.Duration
}

// defaultSteps cover a few of the page's polls each (it polls every few
// seconds); the screenshot bound is for a slow machine.
var defaultSteps = steps{live: 30 * time.Second, content: 20 * time.Second, detail: 10 * time.Second, shot: 20 * time.Second}

// pollEvery is how often a step reads the page.
const pollEvery = 250 * time.Millisecond

// Options say what to load and what to expect.
type Options struct {
	// Chromium is the browser binary (Debian's /usr/bin/chromium).
	Chromium string
	// URL is the page: the hub admin listener's /ui.
	URL string
	// Out receives the screenshots and Chromium's output.
	Out string
	// Clusters must each have a card.
	Clusters []string
	// Prefer are sessions known to have escaped and followed (from the
	// JSON); the row clicked is one of them when the page lists one.
	Prefer []string
	// Prefix requires the content-prefix panel to show the index as on,
	// with a hot prefix listed.
	Prefix bool
	// Width and Height are the viewport in CSS pixels.
	Width, Height int64
	// Progress receives a line per step (nil: discarded).
	Progress io.Writer

	// steps replaces defaultSteps when set (tests).
	steps *steps
}

// Result says what the run saw and saved.
type Result struct {
	// PageShot and SessionShot are the screenshots' paths.
	PageShot, SessionShot string
	// Session is the session whose row was opened.
	Session string
}

// Run loads the page in a fresh headless Chromium and checks it. On a
// failure after the page loaded it saves FailureShot too, when the
// browser still answers.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.steps == nil {
		o.steps = &defaultSteps
	}
	progress := o.Progress
	profile, err := os.MkdirTemp("", "uie2e-chromium-")
	if err != nil {
		return Result{}, err
	}
	// Deferred first, so it runs last: after the browser has exited.
	defer func() { _ = os.RemoveAll(profile) }()
	logf, err := os.Create(filepath.Join(o.Out, ChromiumLog))
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = logf.Close() }()

	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(o.Chromium)}
	for _, f := range Flags {
		opts = append(opts, chromedp.Flag(f, true))
	}
	opts = append(opts, chromedp.UserDataDir(profile), chromedp.CombinedOutput(logf))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc() // kills the browser and waits for it
	tctx, cancelTab := chromedp.NewContext(actx)
	defer cancelTab()

	// Subscribing starts the browser and the tab; it comes before the
	// navigation so that no message of the page's start is missed.
	started := time.Now()
	con := &consoleErrors{}
	messages := chromedp.Console(tctx)
	consoleDone := make(chan struct{})
	go func() {
		defer close(consoleDone)
		for m, err := range messages {
			if err != nil {
				return
			}
			con.add(m)
		}
	}()
	defer func() { cancelTab(); <-consoleDone }()

	if err := chromedp.Do(tctx, chromedp.EmulateViewport(o.Width, o.Height)); err != nil {
		return Result{}, fmt.Errorf("starting %s (its output is in %s): %w", o.Chromium, filepath.Join(o.Out, ChromiumLog), err)
	}
	fmt.Fprintf(progress, "browser: %s up in %.1f s, loading %s\n", o.Chromium, time.Since(started).Seconds(), o.URL)
	resp, err := chromedp.Run(tctx, chromedp.NavigateResponse(o.URL))
	if err != nil {
		return Result{}, fmt.Errorf("loading %s: %w", o.URL, err)
	}
	if resp == nil || resp.Status != http.StatusOK {
		status := int64(0)
		if resp != nil {
			status = resp.Status
		}
		return Result{}, fmt.Errorf("loading %s: expected HTTP 200, got %d", o.URL, status)
	}
	res, err := check(tctx, o, con)
	if err != nil {
		if shot, serr := screenshot(tctx, o.steps.shot, filepath.Join(o.Out, FailureShot)); serr == nil {
			err = fmt.Errorf("%w (the page at the failure: %s)", err, shot)
		}
	}
	return res, err
}

// check runs the page's checks once it loaded, then the console's.
func check(ctx context.Context, o Options, con *consoleErrors) (Result, error) {
	progress, within := o.Progress, o.steps
	started := time.Now()
	if _, err := waitFor(ctx, within.live, live); err != nil {
		return Result{}, errors.Join(err, con.err())
	}
	fmt.Fprintf(progress, "browser: #status live after %.1f s\n", time.Since(started).Seconds())
	var session string
	if _, err := waitFor(ctx, within.content, func(s snapshot) error {
		id, rowErr := followedRow(s, o.Prefer)
		session = id
		var prefixErr error
		if o.Prefix {
			prefixErr = prefixShown(s)
		}
		return errors.Join(live(s), controlsShown(s), clustersShown(s, o.Clusters), rowErr, prefixErr)
	}); err != nil {
		return Result{}, errors.Join(err, con.err())
	}
	fmt.Fprintf(progress, "browser: the filters, %d cluster cards and session %s (escape, followed) shown\n", len(o.Clusters), session)
	var res Result
	var err error
	if res.PageShot, err = screenshot(ctx, within.shot, filepath.Join(o.Out, PageShot)); err != nil {
		return res, err
	}
	res.Session = session
	sel := `#sessions [data-session-id=` + cssString(session) + `]`
	if err := click(ctx, within.detail, sel); err != nil {
		return res, err
	}
	if _, err := waitFor(ctx, within.detail, detailFollowed); err != nil {
		return res, errors.Join(fmt.Errorf("after clicking session %s: %w", session, err), con.err())
	}
	fmt.Fprintf(progress, "browser: #session-detail of %s shows a followed turn\n", session)
	if res.SessionShot, err = screenshot(ctx, within.shot, filepath.Join(o.Out, SessionShot)); err != nil {
		return res, err
	}
	return res, con.err()
}

// click clicks the first element sel matches, again while the page
// replaces the element between the lookup and the click (it re-renders
// its lists on every poll), for at most within.
func click(ctx context.Context, within time.Duration, sel string) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	// The element is looked up and clicked in one evaluation: a mouse
	// click through the protocol takes several round trips (find, scroll,
	// box, press, release), and a page that re-renders in between wins
	// the race whenever the machine is busy.
	js := `(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); if (!e) return false; e.click(); return true; })()`
	for tries := 1; ; tries++ {
		clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js))
		if err == nil && clicked {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("no element matches %s", sel)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clicking %s (%d tries within %s): %w", sel, tries, within, err)
		case <-t.C:
		}
	}
}

// waitFor reads the page every pollEvery until check passes, for at most
// within; the error is check's last answer.
func waitFor(ctx context.Context, within time.Duration, check func(snapshot) error) (snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	var last error
	for {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[snapshot](snapshotJS))
		switch {
		case err == nil:
			if last = check(s); last == nil {
				return s, nil
			}
		case ctx.Err() == nil:
			last = fmt.Errorf("reading the page: %w", err)
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = context.Cause(ctx)
			}
			return s, fmt.Errorf("within %s: %w", within, last)
		case <-t.C:
		}
	}
}

// screenshot saves a full-page PNG and returns its path.
func screenshot(ctx context.Context, within time.Duration, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	// Quality 100 asks for PNG.
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return "", fmt.Errorf("taking the screenshot %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return "", err
	}
	return path, nil
}

// consoleErrors collects the page's console errors, uncaught exceptions
// and error entries of the browser log (a failed load of the page's
// script or style sheet is one).
type consoleErrors struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func (c *consoleErrors) add(m chromedp.ConsoleMessage) {
	if m.Type != chromedp.ConsoleError && !m.IsException() {
		return
	}
	// Chromium asks every site for /favicon.ico; a page without one is
	// not broken.
	if strings.HasSuffix(m.URL, "/favicon.ico") {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, m)
}

// err is nil without errors, else one listing them.
func (c *consoleErrors) err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.msgs) == 0 {
		return nil
	}
	lines := make([]string, 0, len(c.msgs))
	for _, m := range c.msgs[:min(len(c.msgs), maxListed)] {
		where := ""
		if m.URL != "" {
			where = fmt.Sprintf(" (%s:%d)", m.URL, m.Line+1)
		}
		lines = append(lines, m.String()+where)
	}
	return fmt.Errorf("expected no console errors or uncaught exceptions; found %d:\n  %s", len(c.msgs), strings.Join(lines, "\n  "))
}
