package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stargate-router/stargate/tools/obs/internal/exprs"
	"github.com/stargate-router/stargate/tools/obs/internal/promql"
)

func runExprs(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("exprs", flag.ContinueOnError)
	chart := fs.String("chart", "charts/observability", "the observability chart")
	out := fs.String("out", "", "rule file to write (required)")
	window := fs.String("window", "5m", "what $__rate_interval and the other interval variables become")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("%w: -out is required", errUsage)
	}
	es, _, err := exprs.Chart(*chart, *window)
	if err != nil {
		return err
	}
	// Our parser (Prometheus 2.42's, as promtool) names the panel of a bad
	// expression; promtool then checks the same text.
	var bad []string
	for _, e := range es {
		if _, err := promql.Parse(e.Query); err != nil {
			bad = append(bad, fmt.Sprintf("  %s: %v", e.Where, err))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d expressions do not parse:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	data, err := exprs.RuleFile(es)
	if err != nil {
		return err
	}
	if err := os.WriteFile(*out, data, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "exprs: %d expressions parse; wrote %s for promtool\n", len(es), *out)
	return nil
}
