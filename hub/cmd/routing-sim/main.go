// Command routing-sim replays a workload file (pkg/workload, as written by
// loadgen generate) offline through the hub's real load-balancing code on
// simulated mock-engine clusters, once per arm, and prints a side-by-side
// Markdown table (and optionally a JSON report). The same workload, fleet
// and seed always give byte-identical output. See docs/routing-sim.md.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/hub/internal/prefixindex"
	"github.com/stargate-router/stargate/hub/internal/sim"
	"github.com/stargate-router/stargate/hub/internal/state"
	"github.com/stargate-router/stargate/pkg/workload"
)

const usage = `routing-sim replays a workload through the hub's routing algorithms on simulated clusters.

Usage:
  routing-sim --workload FILE [--warmup FILE,...] [--fleet fleet.json] [--arms a,b,...] [--seed N] [--json out.json] [--md out.md]
  routing-sim --print-fleet            print the built-in fleet as JSON (a starting point for --fleet)
  routing-sim --print-arm NAME         print a built-in arm's lb-config.json

Arms (--arms, comma-separated): a built-in name (%s; "oracle" is
accepted for greedy-ttft), NAME=path/to/lb-config.json, or a path (named after the file). In a
config file the model key "$MODEL" stands for the workload's model.

Flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type config struct {
	workload   string
	warmup     string
	fleet      string
	arms       string
	seed       uint64
	jsonOut    string
	mdOut      string
	parallel   int
	interval   time.Duration
	changeGap  time.Duration
	affinity   string
	factor     float64
	factorSet  bool
	printFleet bool
	printArm   string
	quiet      bool
	// whenFull overrides the fleet's pylon.engine_affinity_when_full.
	whenFull string
	// backendAffinity and loadFactor are the hub's --backend-affinity
	// and --backend-affinity-load-factor.
	backendAffinity string
	loadFactor      float64
	// prefixIndex is the hub's --prefix-index-* flags; prefixMark says
	// when a prefix-aware decision's cluster becomes a holder.
	prefixIndex prefixindex.Config
	prefixMark  string
}

func run(args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("routing-sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, usage, strings.Join(sim.BuiltinArmNames(), ", "))
		fs.PrintDefaults()
	}
	fs.StringVar(&c.workload, "workload", "", "workload file (JSON Lines, pkg/workload format; loadgen generate writes one)")
	fs.StringVar(&c.warmup, "warmup", "", "comma-separated workload files each arm's stack served before --workload, in order (its pylons keep the input rate they learned)")
	fs.StringVar(&c.fleet, "fleet", "", "fleet JSON file (default: the built-in fleet, see --print-fleet)")
	fs.StringVar(&c.arms, "arms", strings.Join(sim.DefaultArmNames, ","), "comma-separated arms")
	fs.Uint64Var(&c.seed, "seed", 1, "simulation seed (load balancers' random source)")
	fs.StringVar(&c.jsonOut, "json", "", "also write the report as JSON to this file")
	fs.StringVar(&c.mdOut, "md", "", "also write the Markdown table to this file")
	fs.IntVar(&c.parallel, "parallel", runtime.GOMAXPROCS(0), "arms simulated at once (the output does not depend on it)")
	fs.DurationVar(&c.interval, "pylon-interval", 0, "override the fleet's pylon report interval (e.g. 1s)")
	fs.DurationVar(&c.changeGap, "pylon-change-gap", -1, "override the fleet's pylon change gap (0 = report on the interval only)")
	fs.StringVar(&c.affinity, "engine-affinity", "", "override the fleet's pylon engine choice: on (by affinity key) or off (least outstanding)")
	fs.Func("engine-affinity-load-factor", "override the fleet's pylon engine-affinity load factor (≥ 1; negative = no load bound)", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		c.factor, c.factorSet = v, true
		return err
	})
	fs.StringVar(&c.whenFull, "engine-affinity-when-full", "", "override the fleet's pylon rule for a key whose engine has no free slot: spill (to another engine, the pylon's default) or queue (on its engine, pylon --engine-affinity-when-full queue)")
	fs.BoolVar(&c.printFleet, "print-fleet", false, "print the built-in fleet JSON and exit")
	fs.StringVar(&c.printArm, "print-arm", "", "print a built-in arm's lb-config.json and exit")
	fs.BoolVar(&c.quiet, "quiet", false, "do not print the table to stdout")
	fs.StringVar(&c.backendAffinity, "backend-affinity", "on", "the hub's --backend-affinity: on (by affinity key, bounded load) or off (round robin) inside a cluster")
	fs.Float64Var(&c.loadFactor, "backend-affinity-load-factor", state.DefaultBackendAffinityLoadFactor, "the hub's --backend-affinity-load-factor (0: no bound)")
	fs.IntVar(&c.prefixIndex.MaxNodes, "prefix-index-max-nodes", prefixindex.DefaultMaxNodes, "the hub's --prefix-index-max-nodes: prompt-prefix checkpoints its prefix index keeps")
	fs.IntVar(&c.prefixIndex.MaxHoldersPerNode, "prefix-index-max-holders", prefixindex.DefaultMaxHoldersPerNode, "the hub's --prefix-index-max-holders: clusters one checkpoint remembers")
	fs.DurationVar(&c.prefixIndex.TTL, "prefix-index-ttl", prefixindex.DefaultTTL, "the hub's --prefix-index-ttl: how long a holder counts after its last mark")
	fs.StringVar(&c.prefixMark, "prefix-mark", "headers", "when a prefix-aware decision's cluster becomes a holder: headers (its 2xx headers reach the hub, after prefill, as the live hub does) or dispatch (at once; a what-if)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "routing-sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := c.do(stdout); err != nil {
		fmt.Fprintf(stderr, "routing-sim: %v\n", err)
		return 1
	}
	return 0
}

func (c *config) do(stdout io.Writer) error {
	if c.printFleet {
		b, err := json.MarshalIndent(sim.DefaultFleet(), "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	if c.printArm != "" {
		a, ok := sim.BuiltinArm(c.printArm)
		if !ok || a.GreedyTTFT {
			return fmt.Errorf("no built-in lb-config arm %q (have %s)", c.printArm, strings.Join(sim.BuiltinConfigArmNames(), ", "))
		}
		_, err := fmt.Fprintf(stdout, "%s\n", a.Config)
		return err
	}
	if c.workload == "" {
		return errors.New("--workload is required (see --help)")
	}
	fleet := sim.DefaultFleet()
	if c.fleet != "" {
		f, err := sim.LoadFleet(c.fleet)
		if err != nil {
			return err
		}
		fleet = f
	}
	if c.interval > 0 {
		fleet.Pylon.IntervalMs = float64(c.interval) / float64(time.Millisecond)
	}
	if c.changeGap >= 0 {
		fleet.Pylon.ChangeGapMs = float64(c.changeGap) / float64(time.Millisecond)
	}
	if c.affinity != "" {
		fleet.Pylon.EngineAffinity = c.affinity
	}
	if c.factorSet {
		fleet.Pylon.EngineAffinityLoadFactor = c.factor
	}
	if c.whenFull != "" {
		fleet.Pylon.EngineAffinityWhenFull = c.whenFull
	}
	if err := fleet.Validate(); err != nil {
		return err
	}
	arms, err := sim.ParseArms(c.arms)
	if err != nil {
		return err
	}
	w, fp, err := workload.ReadFile(c.workload)
	if err != nil {
		return err
	}
	p, err := sim.Prepare(w, fp, fleet.BlockTokens)
	if err != nil {
		return err
	}
	warmup, err := prepareAll(c.warmup, fleet.BlockTokens)
	if err != nil {
		return err
	}
	if c.backendAffinity != "on" && c.backendAffinity != "off" {
		return fmt.Errorf("--backend-affinity %q: want on or off", c.backendAffinity)
	}
	if err := state.CheckBackendAffinityLoadFactor(c.loadFactor); err != nil {
		return fmt.Errorf("--backend-affinity-load-factor %w", err)
	}
	if err := checkPrefixIndex(c.prefixIndex); err != nil {
		return err
	}
	if c.prefixMark != "headers" && c.prefixMark != "dispatch" {
		return fmt.Errorf("--prefix-mark %q: want headers or dispatch", c.prefixMark)
	}
	opts := sim.Options{Seed: c.seed, State: []state.Option{state.BackendAffinity(c.backendAffinity == "on", c.loadFactor)},
		PrefixIndex: c.prefixIndex, MarkPrefixAtDispatch: c.prefixMark == "dispatch", Warmup: warmup}
	rep, err := sim.Compare(p, fleet, arms, opts, c.parallel)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		return err
	}
	if c.mdOut != "" {
		if err := os.WriteFile(c.mdOut, md.Bytes(), 0o644); err != nil { //nolint:gosec // G306: a report, not a secret
			return err
		}
	}
	if c.jsonOut != "" {
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, js.Bytes(), 0o644); err != nil { //nolint:gosec // G306: a report, not a secret
			return err
		}
	}
	if !c.quiet {
		_, err = stdout.Write(md.Bytes())
	}
	return err
}

// prepareAll reads and prepares the comma-separated workload files of
// list (none for "").
func prepareAll(list string, blockTokens int) ([]*sim.Prepared, error) {
	if list == "" {
		return nil, nil
	}
	var out []*sim.Prepared
	for _, path := range strings.Split(list, ",") {
		w, fp, err := workload.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--warmup: %w", err)
		}
		p, err := sim.Prepare(w, fp, blockTokens)
		if err != nil {
			return nil, fmt.Errorf("--warmup %s: %w", path, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// checkPrefixIndex validates the --prefix-index-* flags with the hub's
// bounds, naming the flag.
func checkPrefixIndex(x prefixindex.Config) error {
	var errs []error
	if x.MaxNodes < prefixindex.MinNodes || x.MaxNodes > prefixindex.MaxNodesLimit {
		errs = append(errs, fmt.Errorf("--prefix-index-max-nodes: must be %d to %d, got %d", prefixindex.MinNodes, prefixindex.MaxNodesLimit, x.MaxNodes))
	}
	if x.MaxHoldersPerNode < 1 || x.MaxHoldersPerNode > prefixindex.MaxHoldersLimit {
		errs = append(errs, fmt.Errorf("--prefix-index-max-holders: must be 1 to %d, got %d", prefixindex.MaxHoldersLimit, x.MaxHoldersPerNode))
	}
	if x.TTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("--prefix-index-ttl: must be at least 1ms, got %v", x.TTL))
	}
	return errors.Join(errs...)
}
