// Command uie2e is what `make ui-e2e` runs: a real-browser test of the
// hub's live routing page. It starts the demo stack (bin/demo --keep) with
// a workload that makes sessions escape their cluster and follow, waits
// until the hub's /debug/routing JSON lists every cluster of /debug/state
// and such a session, then loads the page (/ui on the hub's admin
// listener) in a headless Chromium and checks what it shows. The
// screenshots, the demo's output and run folder and Chromium's output go
// to -out. It stops everything it started, also on Ctrl-C or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/tools/obs/internal/demostack"
	"github.com/stargate-router/stargate/tools/obs/internal/pagecheck"
	"github.com/stargate-router/stargate/tools/obs/internal/routeview"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the parsed flags.
type options struct {
	bin, out, chromium string
	timeout            time.Duration
	sessions, turns    int
	workers, waitMs    int
	width, height      int64
	verbose            bool
}

// The bounds of the steps before the browser, inside -timeout.
const (
	// stackWithin covers the demo's startup and its whole workload.
	stackWithin = 100 * time.Second
	// dataWithin is how long the routing JSON may take to show what the
	// page must show; the workload is done by then, so it is there at once
	// unless the hub's view is broken.
	dataWithin = 30 * time.Second
	// adminTimeout bounds one admin request.
	adminTimeout = 10 * time.Second
)

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("uie2e", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "uie2e: a real-browser test of the hub's routing page (/ui) against the demo stack")
		fmt.Fprintln(stderr, "usage: uie2e -bin <folder of the built binaries> [-out <folder>] [flags]")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.bin, "bin", "bin", "folder of the built binaries (demo, gateway, hub, pylon, mock-engine, loadgen)")
	fs.StringVar(&o.out, "out", "", "folder for the screenshots, the demo's output and run folder and Chromium's output (default results/ui-e2e-<UTC time>)")
	fs.StringVar(&o.chromium, "chromium", "/usr/bin/chromium", "the Chromium binary (never downloaded)")
	fs.DurationVar(&o.timeout, "timeout", 3*time.Minute+30*time.Second, "bound of the whole run")
	// The workload: more clients than the fleet's 64 engine slots keep
	// clusters full, so sessions escape; a short affinity wait makes a
	// returning session escape instead of waiting its cluster out.
	fs.IntVar(&o.sessions, "sessions", 64, "demo --sessions")
	fs.IntVar(&o.turns, "turns", 4, "demo --turns")
	fs.IntVar(&o.workers, "workers", 96, "demo --workers")
	fs.IntVar(&o.waitMs, "affinity-wait-ms", 20, "demo --affinity-wait-ms")
	fs.Int64Var(&o.width, "width", 1600, "browser viewport width (CSS pixels)")
	fs.Int64Var(&o.height, "height", 2400, "browser viewport height (CSS pixels)")
	fs.BoolVar(&o.verbose, "v", false, "print the demo's output as it runs (it is saved in -out either way)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.sessions < 1 || o.turns < 2 || o.workers < 1 || o.waitMs < 0 || o.timeout <= 0 || o.width < 1 || o.height < 1 {
		return nil, errors.New("-sessions, -workers, -width, -height and -timeout must be > 0, -turns >= 2 (a session follows on a later turn), -affinity-wait-ms >= 0")
	}
	if o.out == "" {
		o.out = filepath.Join("results", "ui-e2e-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	return &o, nil
}

// demoArgs are the demo's workload flags.
func (o *options) demoArgs() []string {
	return []string{"--sessions", strconv.Itoa(o.sessions), "--turns", strconv.Itoa(o.turns),
		"--workers", strconv.Itoa(o.workers), "--affinity-wait-ms", strconv.Itoa(o.waitMs),
		// The prefix holders lead the affinity order, so the page's
		// content-prefix panel has data to show.
		"--prefix-affinity"}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "uie2e:", err)
		return 2
	}
	started := time.Now()
	if err := test(ctx, o, stdout); err != nil {
		if ctx.Err() != nil {
			first, _, _ := strings.Cut(err.Error(), "\n")
			fmt.Fprintf(stderr, "uie2e: interrupted after %.1f s and stopped everything it started (%s)\n", time.Since(started).Seconds(), first)
			return 130
		}
		fmt.Fprintf(stderr, "uie2e: FAIL after %.1f s: %v\n", time.Since(started).Seconds(), err)
		fmt.Fprintf(stderr, "uie2e: everything the run wrote is in %s\n", o.out)
		return 1
	}
	fmt.Fprintf(stdout, "uie2e: PASS in %.1f s\n", time.Since(started).Seconds())
	return 0
}

// test is the whole run; the error says what was expected and found.
func test(ctx context.Context, o *options, stdout io.Writer) (err error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if _, err := os.Stat(o.chromium); err != nil { //nolint:gosec // G703: the caller names its browser
		return fmt.Errorf("expected Chromium at %s (make ui-e2e installs Debian's chromium): %w", o.chromium, err)
	}
	out, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o750); err != nil { //nolint:gosec // G703: the caller names its output folder
		return err
	}
	demoLog, err := os.Create(filepath.Join(out, "demo-output.txt")) //nolint:gosec // G304: in the caller's output folder
	if err != nil {
		return err
	}
	defer func() { _ = demoLog.Close() }()
	var log io.Writer = demoLog
	if o.verbose {
		log = io.MultiWriter(demoLog, stdout)
	}

	fmt.Fprintf(stdout, "uie2e: starting the demo stack from %s with %v (output in %s)\n", o.bin, o.demoArgs(), demoLog.Name())
	sctx, scancel := context.WithTimeout(ctx, stackWithin)
	st, ep, err := demostack.Start(sctx, demostack.Options{BinDir: o.bin, ResultsDir: out, Args: o.demoArgs(), Output: log})
	scancel()
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stdout, "uie2e: stopping the demo stack")
		err = errors.Join(err, st.Stop())
	}()
	fmt.Fprintf(stdout, "uie2e: workload done, stack up; hub admin %s\n", ep.HubAdmin)

	client := routeview.Client{Admin: ep.HubAdmin, HTTP: &http.Client{Timeout: adminTimeout}}
	clusters, err := client.Clusters(ctx)
	if err != nil {
		return err
	}
	dctx, dcancel := context.WithTimeout(ctx, dataWithin)
	view, err := routeview.WaitReady(dctx, client.View, clusters, 500*time.Millisecond)
	dcancel()
	if err != nil {
		return err
	}
	if err := view.CheckPrefix(); err != nil {
		return err
	}
	followed := view.EscapedAndFollowed()
	fmt.Fprintf(stdout, "uie2e: /debug/routing lists the %d clusters of /debug/state %v and %d of its %d sessions escaped and followed\n",
		len(clusters), clusters, len(followed), len(view.Sessions.Items))

	res, err := pagecheck.Run(ctx, pagecheck.Options{Chromium: o.chromium, URL: ep.HubAdmin + "/ui", Out: out, Prefix: true,
		Clusters: clusters, Prefer: followed, Width: o.width, Height: o.height, Progress: prefixed{stdout}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "uie2e: screenshot %s\nuie2e: screenshot %s (session %s opened)\n", res.PageShot, res.SessionShot, res.Session)
	return nil
}

// prefixed writes each write with the command's prefix.
type prefixed struct{ w io.Writer }

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(p.w, "uie2e: %s", b); err != nil {
		return 0, err
	}
	return len(b), nil
}
