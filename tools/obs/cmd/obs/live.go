package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/tools/obs/internal/check"
	"github.com/stargate-router/stargate/tools/obs/internal/demostack"
	"github.com/stargate-router/stargate/tools/obs/internal/exprs"
	"github.com/stargate-router/stargate/tools/obs/internal/metricsdoc"
	"github.com/stargate-router/stargate/tools/obs/internal/promql"
	"github.com/stargate-router/stargate/tools/obs/internal/rules"
	"github.com/stargate-router/stargate/tools/obs/internal/scrape"
)

// stackFlags are the flags of the commands that run the demo stack.
type stackFlags struct {
	bin, results string
}

func (s *stackFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&s.bin, "bin", "bin", "folder of the built binaries (make build): demo, gateway, hub, pylon, mock-engine")
	fs.StringVar(&s.results, "results", "", "parent of the demo's run folder (default: a temporary folder, removed)")
}

// start runs the demo with a small workload (it fills the labelled series
// the checks need) and returns its stack, endpoints and a cleanup.
func (s *stackFlags) start(ctx context.Context, log io.Writer, demoArgs ...string) (*demostack.Stack, demostack.Endpoints, func(), error) {
	results, cleanup := s.results, func() {}
	if results == "" {
		dir, err := os.MkdirTemp("", "obs-demo-")
		if err != nil {
			return nil, demostack.Endpoints{}, nil, err
		}
		results, cleanup = dir, func() { _ = os.RemoveAll(dir) }
	}
	st, ep, err := demostack.Start(ctx, demostack.Options{BinDir: s.bin, ResultsDir: results, Args: demoArgs, Output: log})
	if err != nil {
		cleanup()
		return nil, ep, nil, err
	}
	return st, ep, func() {
		if err := st.Stop(); err != nil {
			fmt.Fprintln(log, "obs: stopping the demo stack:", err)
		}
		cleanup()
	}, nil
}

// uses parses every expression for the live check.
func uses(es []exprs.Expr) ([]check.Use, error) {
	out := make([]check.Use, 0, len(es))
	for _, e := range es {
		refs, err := promql.Parse(e.Query)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", e.Where, err)
		}
		if e.Kind == exprs.Variable && len(refs.Selectors) == 1 {
			// label_values(selector, label): the label must be on the series.
			refs.Selectors[0].Labels = append(refs.Selectors[0].Labels, e.Label)
		}
		out = append(out, check.Use{Where: e.Where, Refs: refs})
	}
	return out, nil
}

func records(rs []rules.Rule) map[string]bool {
	out := map[string]bool{}
	for _, r := range rs {
		if r.Record != "" {
			out[r.Record] = true
		}
	}
	return out
}

func runLive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("live", flag.ContinueOnError)
	var sf stackFlags
	sf.register(fs)
	chart := fs.String("chart", "charts/observability", "the observability chart")
	doc := fs.String("metrics-doc", "docs/metrics.md", "the metrics reference to compare")
	verbose := fs.Bool("v", false, "print the demo's output")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	started := time.Now()
	es, rs, err := exprs.Chart(*chart, "5m")
	if err != nil {
		return err
	}
	us, err := uses(es)
	if err != nil {
		return err
	}
	md, err := os.ReadFile(*doc)
	if err != nil {
		return err
	}
	log := io.Discard
	if *verbose {
		log = stderr
	}
	_, ep, stop, err := sf.start(ctx, log, "--sessions", "16", "--turns", "3", "--deadline", "30s")
	if err != nil {
		return err
	}
	defer stop()
	c := &http.Client{Timeout: 30 * time.Second}
	reg, targets, burst, err := liveTraffic(ctx, c, ep)
	if err != nil {
		return err
	}
	rep := check.Run(check.Input{Uses: us, Records: records(rs), Live: reg, Doc: metricsdoc.Parse(string(md)), EventOnly: check.EventOnly()})
	fmt.Fprintf(stdout, "live: %d families from %d endpoints (%s) after a burst of 40 requests (answers by status: %v); %d expressions (dashboards and rules) use %d of them (%.1f s)\n",
		len(reg), len(targets), targetNames(targets), burst, len(es), len(rep.Used), time.Since(started).Seconds())
	for _, n := range rep.Notes {
		fmt.Fprintln(stdout, "  note:", n)
	}
	for _, p := range rep.Problems {
		fmt.Fprintln(stdout, "  FAIL:", p)
	}
	if len(rep.Problems) > 0 {
		return fmt.Errorf("%d problems", len(rep.Problems))
	}
	fmt.Fprintln(stdout, "live: every metric the chart names is exported, and docs/metrics.md matches the registries")
	return nil
}

// liveTraffic adds the traffic a short demo workload lacks (errors, an
// overload burst) and scrapes every endpoint.
func liveTraffic(ctx context.Context, c *http.Client, ep demostack.Endpoints) (scrape.Registry, []demostack.Target, map[int]int, error) {
	if err := ep.Errors(ctx, c); err != nil {
		return nil, nil, nil, err
	}
	// A burst larger than the fleet's 24 engine slots: the hub refuses
	// the excess (admission rejections) and pylons refuse some (retries).
	// On a machine busy enough to stagger the burst every request may
	// find a slot; try again then, at most three times.
	var burst map[int]int
	for i := range 3 {
		var err error
		if burst, err = ep.Burst(ctx, c, "live-"+strconv.Itoa(i), 40, 150); err != nil {
			return nil, nil, nil, err
		}
		if burst[http.StatusServiceUnavailable] > 0 {
			break
		}
	}
	targets, err := ep.Targets(ctx, c)
	if err != nil {
		return nil, nil, nil, err
	}
	reg := scrape.Registry{}
	for _, t := range targets {
		if err := reg.Fetch(ctx, c, t.Name(), t.URL); err != nil {
			return nil, nil, nil, err
		}
	}
	return reg, targets, burst, nil
}

func targetNames(ts []demostack.Target) string {
	n := map[string]int{}
	var order []string
	for _, t := range ts {
		if n[t.Job] == 0 {
			order = append(order, t.Job)
		}
		n[t.Job]++
	}
	parts := make([]string, 0, len(order))
	for _, j := range order {
		if n[j] == 1 {
			parts = append(parts, j)
		} else {
			parts = append(parts, fmt.Sprintf("%d %ss", n[j], j))
		}
	}
	return strings.Join(parts, ", ")
}
