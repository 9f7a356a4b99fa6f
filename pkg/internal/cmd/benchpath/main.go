package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	bin, out, src, goCmd string
	rounds, outTokens    int
	tokenDelayMs         int
	warmup, duration     time.Duration
	paths, sizes         string
	clients, streams     string
	profile              bool
	profileTime          time.Duration
	topN                 int
	benchCount           int
	benchNice            int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var o options
	fs := flag.NewFlagSet("benchpath", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.bin, "bin", "bin", "folder of the built binaries: mock-engine, baseline-proxy, gateway, hub, pylon")
	fs.StringVar(&o.out, "out", "", "results folder (default results/bench-path-<UTC time>)")
	fs.StringVar(&o.src, "src", "", "the repository's root, for the Go benchmarks and the commit (default: the folder holding go.work above the working directory)")
	fs.StringVar(&o.goCmd, "go", "go", "the go command, for the Go benchmarks and pprof")
	fs.IntVar(&o.rounds, "rounds", 2, "rounds, each on fresh processes with the path order rotated by one")
	fs.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "load before each measured row, not measured")
	fs.DurationVar(&o.duration, "duration", 2*time.Second, "measured time per path and row")
	fs.StringVar(&o.paths, "paths", "all", "paths to measure: all, or a list of direct, floor-1, floor-2, floor-3, spine, chain, chain-key")
	fs.StringVar(&o.sizes, "sizes", "1k,32k,256k", "request body sizes (bytes, or k for KiB)")
	fs.StringVar(&o.clients, "clients", "1,32", "concurrent clients per row")
	fs.StringVar(&o.streams, "stream", "off,on", "streaming modes: off (a JSON answer), on (server-sent events)")
	fs.IntVar(&o.outTokens, "output-tokens", 16, "output tokens per answer (events per stream)")
	fs.IntVar(&o.tokenDelayMs, "token-delay-ms", 0, "the engine's delay between output tokens (0: all at once); a paced engine sends each event alone, as a real one does")
	fs.BoolVar(&o.profile, "profile", false, "also take CPU and allocation profiles of gateway, hub and pylon under the chain at 1 KiB with the most clients (round 1, after its rows)")
	fs.DurationVar(&o.profileTime, "profile-time", 10*time.Second, "length of each profile")
	fs.IntVar(&o.topN, "top", 5, "functions per tier in the report's profile tops")
	fs.IntVar(&o.benchCount, "bench-count", 6, "-count of the tiers' Go benchmarks (0 skips them)")
	fs.IntVar(&o.benchNice, "bench-nice", 19, "nice level of the Go benchmarks (0: none)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	b, err := newBench(o, stdout)
	if err != nil {
		fmt.Fprintln(stderr, "benchpath:", err)
		return 2
	}
	if err := b.run(ctx); err != nil {
		fmt.Fprintln(stderr, "benchpath:", err)
		return 1
	}
	return 0
}

// newBench checks the flags and resolves the defaults.
func newBench(o options, stdout io.Writer) (*bench, error) {
	if o.rounds < 1 || o.warmup <= 0 || o.duration <= 0 || o.outTokens < 1 || o.benchCount < 0 || o.tokenDelayMs < 0 {
		return nil, errors.New("-rounds and -output-tokens must be >= 1, -warmup and -duration > 0, -bench-count and -token-delay-ms >= 0")
	}
	if o.profile && o.profileTime < time.Second {
		return nil, errors.New("-profile-time must be at least 1s")
	}
	paths, err := pathsByName(o.paths)
	if err != nil {
		return nil, fmt.Errorf("-paths: %w", err)
	}
	rows, err := rowsOf(o.sizes, o.clients, o.streams)
	if err != nil {
		return nil, err
	}
	if o.src == "" {
		if o.src, err = findRoot("."); err != nil && o.benchCount > 0 {
			return nil, fmt.Errorf("-src: %w", err)
		}
	}
	if o.out == "" {
		o.out = filepath.Join("results", "bench-path-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	return &bench{o: o, paths: paths, rows: rows, stdout: stdout}, nil
}

// rowsOf is every combination of the size, client and stream lists, sizes
// outermost, in the order given.
func rowsOf(sizes, clients, streams string) ([]row, error) {
	var ss, cs []int
	var ms []bool
	for s := range strings.SplitSeq(sizes, ",") {
		n, err := parseSize(s)
		if err != nil {
			return nil, fmt.Errorf("-sizes: %w", err)
		}
		ss = append(ss, n)
	}
	for c := range strings.SplitSeq(clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-clients: %q is not a count >= 1", c)
		}
		cs = append(cs, n)
	}
	for m := range strings.SplitSeq(streams, ",") {
		switch strings.TrimSpace(m) {
		case "off":
			ms = append(ms, false)
		case "on":
			ms = append(ms, true)
		default:
			return nil, fmt.Errorf("-stream: %q is neither off nor on", m)
		}
	}
	var out []row
	for _, s := range ss {
		for _, c := range cs {
			for _, m := range ms {
				out = append(out, row{Size: s, Clients: c, Stream: m})
			}
		}
	}
	return out, nil
}

// parseSize reads "1047", "1k" or "256K" (KiB).
func parseSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	mult := 1
	if t, ok := strings.CutSuffix(strings.ToLower(s), "k"); ok {
		s, mult = t, 1024
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a size", s)
	}
	return n * mult, nil
}

// findRoot is the nearest folder at or above dir holding go.work.
func findRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", errors.New("no go.work above the working directory")
		}
		d = up
	}
}
