// Command demo is what `make demo` runs: it starts a small stack of this
// project's binaries on loopback, drives a workload through it with the
// official OpenAI Go SDK, prints what happened and stops everything it
// started (also on Ctrl-C).
//
// At this stage the stack is a hub and two clusters (a pylon and a mock
// engine each), and the workload is a few multi-turn conversations sent
// straight to the hub, which routes with power-of-n. Each line shows the
// cluster that served a turn, its time to first token and the prompt tokens
// the engine found cached: a turn that lands where the conversation's
// previous turn ran starts warm; one that lands elsewhere starts cold.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// settle is how long the demo waits for a started binary to answer.
const settle = 15 * time.Second

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	binDir := fs.String("bin-dir", "bin", "directory holding the built binaries")
	check := fs.Bool("check", false, "exit 1 unless every request succeeded, every turn served where its conversation ran just before reported cached tokens, and every turn on a cluster new to its conversation reported none (used by make e2e)")
	keep := fs.Bool("keep", os.Getenv("DEMO_KEEP") == "1", "leave the stack running until Ctrl-C and print its URLs (env DEMO_KEEP=1)")
	conversations := fs.Int("conversations", 4, "conversations to run")
	turns := fs.Int("turns", 3, "turns per conversation")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	st := &stack{binDir: *binDir, out: stderr}
	defer st.stop()
	hubURL, pylonMetrics, err := startStack(ctx, st)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "hub %s routes %s to clusters cluster-a and cluster-b (power-of-n)\n\n", hubURL, demoModel)

	results, err := runConversations(ctx, hubURL, *conversations, *turns)
	printResults(stdout, results)
	if err != nil {
		fmt.Fprintln(stderr, "demo:", err)
		return 1
	}
	problems := verify(results)
	if *keep {
		fmt.Fprintf(stdout, "\nDEMO_KEEP: the stack stays up until Ctrl-C\n  hub:    %s/v1  state %s/debug/state\n  pylons: %s\n", hubURL, hubURL, pylonMetrics)
		<-ctx.Done()
	}
	if *check && len(problems) > 0 {
		for _, p := range problems {
			fmt.Fprintln(stderr, "demo: check failed:", p)
		}
		return 1
	}
	return 0
}

// startStack starts two mock engines, a hub and a pylon per engine, each
// pylon its own cluster, and waits until the hub routes to both.
func startStack(ctx context.Context, st *stack) (hubURL, pylonMetrics string, err error) {
	// A real registration token, as in production: pylons without it are
	// refused by the hub.
	tokenFile, err := writeToken()
	if err != nil {
		return "", "", err
	}
	st.cleanup = append(st.cleanup, func() { _ = os.Remove(tokenFile) })
	hubPorts, err := st.start(ctx, "hub", "hub", 3, func(p []int) []string {
		return []string{"--listen", addr(p[0]), "--backend-listen", addr(p[1]), "--metrics-listen", addr(p[2]),
			"--registration-token-file", tokenFile, "--log-level", "warn"}
	}, "/readyz")
	if err != nil {
		return "", "", err
	}
	hubURL = "http://" + addr(hubPorts[0])
	for _, c := range []string{"a", "b"} {
		engine, err := st.start(ctx, "engine-"+c, "mock-engine", 1, func(p []int) []string {
			return []string{"--listen", addr(p[0]), "--model-name", demoModel,
				"--prefill-tokens-per-s", "20000", "--cached-prefill-tokens-per-s", "200000",
				"--ttft-ms", "20", "--token-delay-ms", "5", "--num-tokens", "24", "--log-level", "warn"}
		}, "/health")
		if err != nil {
			return "", "", err
		}
		pylon, err := st.start(ctx, "pylon-"+c, "pylon", 2, func(p []int) []string {
			return []string{"--listen", addr(p[0]), "--metrics-listen", addr(p[1]),
				"--stargate-address", addr(hubPorts[1]), "--upstream-http-base-url", "http://" + addr(engine[0]),
				"--model-name", demoModel, "--inference-server-id", "pylon-" + c, "--cluster-id", "cluster-" + c,
				"--auth-token-file", tokenFile,
				"--initial-input-tps", "20000", "--kv-cache-stats-path", "/kv-cache/stats",
				"--min-update-interval-ms", "200", "--log-level", "warn"}
		}, "/readyz")
		if err != nil {
			return "", "", err
		}
		pylonMetrics += "http://" + addr(pylon[1]) + "/metrics  "
	}
	if err := waitClusters(ctx, hubURL, demoModel, 2); err != nil {
		return "", "", err
	}
	return hubURL, pylonMetrics, nil
}

func itoa(n int) string { return strconv.Itoa(n) }

// writeToken writes a fresh random registration token to a private file.
func writeToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "stargate-demo-token-*")
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(hex.EncodeToString(b) + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return f.Name(), err
}
