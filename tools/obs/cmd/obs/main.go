// Command obs generates and checks stargate's observability chart
// (charts/observability): the Grafana dashboards and the Prometheus rules.
//
//	obs gen    write the dashboards' JSON from their Go definitions
//	obs exprs  write every panel, variable and rule expression as a rule file for `promtool check rules`
//	obs live   start the demo stack, drive traffic, scrape every /metrics and check that each metric
//	           the dashboards and rules name is exported, and that docs/metrics.md documents exactly
//	           what is exported
//	obs e2e    the same stack scraped by a real Prometheus under load: every panel query and
//	           recording rule must return data; writes a report and one picture per dashboard
//
// `make dashboards-check` runs gen's test, exprs and live; `make observe-e2e` runs e2e.
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
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: obs <command> [flags]

commands:
  gen     write the dashboards' JSON from tools/obs/internal/dashboards
  exprs   write every expression the chart evaluates as a rule file (promtool check rules)
  live    check the metrics the chart names and docs/metrics.md against a live demo stack
  e2e     run a real Prometheus against the demo stack under load; report and pictures

"obs <command> -h" lists a command's flags.`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) error{
		"gen": runGen, "exprs": runExprs, "live": runLive, "e2e": runE2E,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "obs: unknown command %q\n%s\n", args[0], usage)
		return 2
	}
	err := cmd(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintln(stderr, "obs "+args[0]+":", err)
		return 2
	default:
		fmt.Fprintln(stderr, "obs "+args[0]+":", err)
		return 1
	}
}

// errUsage marks bad flags (exit 2).
var errUsage = errors.New("usage")

// parse parses a command's flags; errors are usage errors.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, fs.Args())
	}
	return nil
}
