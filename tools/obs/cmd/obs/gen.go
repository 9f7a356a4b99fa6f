package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/stargate-router/stargate/tools/obs/internal/dashboards"
)

func runGen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	dir := fs.String("out", "charts/observability/dashboards", "folder of the dashboards' JSON")
	check := fs.Bool("check", false, "write nothing; fail when a file differs from its definition")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *check {
		stale, err := dashboards.Stale(*dir)
		if err != nil {
			return err
		}
		if len(stale) > 0 {
			return dashboards.StaleError(stale)
		}
		fmt.Fprintf(stdout, "dashboards: %d files current\n", len(dashboards.All()))
		return nil
	}
	if err := dashboards.Write(*dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dashboards: wrote %d files to %s\n", len(dashboards.All()), *dir)
	return nil
}
