// Command demo is what `make demo` runs: it starts a small stack of this
// project's binaries on loopback, drives a workload through it with the
// official OpenAI Go SDK, prints what happened and stops everything it
// started (also on Ctrl-C).
//
// At this stage the stack is two mock engines and the workload is one
// two-turn conversation: turn 2 goes to the engine that served turn 1 (its
// prefix is cached) and, for contrast, to the other engine (cold). The
// numbers show what a router gains by keeping a session on its cache.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binDir := fs.String("bin-dir", "bin", "directory holding the built binaries")
	check := fs.Bool("check", false, "exit 1 unless the warm turn reports cached tokens and the cold one none (used by make e2e)")
	keep := fs.Bool("keep", os.Getenv("DEMO_KEEP") == "1", "leave the stack running until Ctrl-C and print its URLs (env DEMO_KEEP=1)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	st := &stack{binDir: *binDir, out: stderr}
	defer st.stop()

	engineArgs := []string{
		"--model-name", demoModel,
		"--prefill-tokens-per-s", "20000", "--cached-prefill-tokens-per-s", "200000",
		"--ttft-ms", "20", "--token-delay-ms", "5", "--num-tokens", "24",
		"--log-level", "warn",
	}
	a, err := st.startEngine(ctx, "engine-a", engineArgs)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	b, err := st.startEngine(ctx, "engine-b", engineArgs)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "two mock engines up: A %s, B %s (model %s)\n\n", a.url, b.url, demoModel)

	results, err := twoTurns(ctx, a.url, b.url)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	printResults(stdout, results)
	ok := verdict(results)
	if *keep {
		fmt.Fprintf(stdout, "\nDEMO_KEEP: engines stay up until Ctrl-C\n  A: %s/v1  metrics %s/metrics  kv %s/kv-cache/stats\n  B: %s/v1  metrics %s/metrics  kv %s/kv-cache/stats\n",
			a.url, a.url, a.url, b.url, b.url, b.url)
		<-ctx.Done()
	}
	if *check && !ok {
		fmt.Fprintln(stderr, "demo: check failed: the warm turn must report cached tokens and the cold turn none")
		return 1
	}
	return 0
}

// settle is how long the demo waits for a started binary to answer.
const settle = 10 * time.Second
