package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/stargate-router/stargate/tools/obs/internal/e2e"
)

func runE2E(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	o := e2e.Options{Interval: 2 * time.Second, Window: 30 * time.Second, Step: 2 * time.Second,
		Load: e2e.Load{Sessions: 224, Turns: 6, Deadline: 90 * time.Second,
			Bursts: []time.Duration{10 * time.Second, 25 * time.Second, 40 * time.Second}, BurstSize: 40, BurstTokens: 150}}
	fs.StringVar(&o.Bin, "bin", "bin", "folder of the built binaries (make build)")
	fs.StringVar(&o.Prometheus, "prometheus", "prometheus", "the prometheus server binary (Debian's prometheus package)")
	fs.StringVar(&o.Chart, "chart", "charts/observability", "the observability chart")
	fs.StringVar(&o.Out, "out", "docs/operations", "folder for the report ("+e2e.ReportFile+") and the dashboards' pictures")
	fs.StringVar(&o.Command, "command", "make observe-e2e", "how the run was started, for the report")
	version := fs.String("version", "dev", "version (commit) the report names")
	fs.IntVar(&o.Load.Sessions, "sessions", o.Load.Sessions, "sessions of loadgen's sessions suite")
	fs.DurationVar(&o.Load.Deadline, "load-deadline", o.Load.Deadline, "bound of the loadgen run")
	verbose := fs.Bool("v", false, "print the children's output")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	o.Log = io.Discard
	if *verbose {
		o.Log = stderr
	}
	fmt.Fprintf(stdout, "observe-e2e: demo stack + Prometheus, %d sessions of load with %d overload bursts (about %s)\n",
		o.Load.Sessions, len(o.Load.Bursts), o.Load.Deadline)
	r, err := e2e.Run(ctx, o)
	if err != nil {
		return err
	}
	if err := r.Write(*version); err != nil {
		return err
	}
	report := filepath.Join(o.Out, e2e.ReportFile)
	fmt.Fprintf(stdout, "observe-e2e: %.0f s; report %s, pictures in %s\n", r.Elapsed().Seconds(), report, o.Out)
	if err := r.Err(); err != nil {
		fmt.Fprintln(stdout, "  FAIL: "+strings.ReplaceAll(err.Error(), "\n", "\n  FAIL: "))
		return fmt.Errorf("%d problems (see %s)", len(r.Problems), report)
	}
	fmt.Fprintln(stdout, "observe-e2e: every panel query and recording rule returned data (or is empty for a stated reason)")
	return nil
}
