package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/promscrape"
	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

// versionsFile is the file of the binaries' build info in an arm's
// folder; the counter files are loadgen's (EnginesBeforeFile, ...).
const versionsFile = "versions.txt"

// hubScrapeTimeout bounds one scrape of the hub's /metrics.
const hubScrapeTimeout = 5 * time.Second

// armStack is the campaign's ArmStack for --compare: a fresh
// stack.BenchFleet for every arm, from the binaries in bin.
type armStack struct {
	bin string
	// logs is the parent of each arm's log folder; empty puts the logs
	// in the arm's results folder.
	logs string
	// target is loadgen.TargetGateway or TargetHub: which URL the runs get.
	target string
	// running is the current arm's stack; nil between arms.
	running *stack.Stack
	// hubs is how many hub replicas the stack runs; the gateway spreads
	// its requests over them, and only the first one's metrics are
	// recorded.
	hubs int
	// http scrapes the hub's /metrics.
	http *http.Client
	// log receives what is recorded without failing the arm (a hub whose
	// metrics cannot be read).
	log io.Writer
}

var (
	_ loadgen.ArmStack    = (*armStack)(nil)
	_ loadgen.RunRecorder = (*armStack)(nil)
)

// Up starts the stack with the arm's lb config, empties the engines'
// caches and records the binaries' versions and the engines' counters in
// armDir.
func (a *armStack) Up(ctx context.Context, arm loadgen.Arm, armDir string) (loadgen.ArmTarget, error) {
	logDir := armDir
	if a.logs != "" {
		logDir = filepath.Join(a.logs, arm.Name)
	}
	st, err := stack.Start(ctx, stack.Options{BinDir: a.bin, LogDir: logDir, Fleet: stack.BenchFleet(),
		LBConfigPath: arm.LBConfig, Principal: "bench", Hubs: a.hubs})
	if err != nil {
		return loadgen.ArmTarget{}, err
	}
	a.running = st
	if err := st.ResetCaches(ctx); err != nil {
		return loadgen.ArmTarget{}, err
	}
	if err := st.WriteVersions(ctx, filepath.Join(armDir, versionsFile)); err != nil {
		return loadgen.ArmTarget{}, fmt.Errorf("%s: %w", versionsFile, err)
	}
	if err := st.WriteEngineCounters(ctx, filepath.Join(armDir, loadgen.EnginesBeforeFile)); err != nil {
		return loadgen.ArmTarget{}, fmt.Errorf("%s: %w", loadgen.EnginesBeforeFile, err)
	}
	ep := st.Endpoints()
	if a.target == loadgen.TargetHub {
		// The hub trusts routing headers only from the gateway's token.
		return loadgen.ArmTarget{URL: ep.Hub, APIKey: ep.GatewayToken}, nil
	}
	return loadgen.ArmTarget{URL: ep.Gateway, APIKey: ep.APIKey}, nil
}

// Down records the engines' and the hub's counters in armDir and stops
// the stack, also when recording fails. The hub's are best effort: a hub
// that cannot be read leaves no hub file and the report says n/a.
func (a *armStack) Down(ctx context.Context, armDir string) error {
	st := a.running
	if st == nil {
		return nil
	}
	a.running = nil
	a.writeHub(ctx, st, filepath.Join(armDir, loadgen.HubAfterFile))
	err := st.WriteEngineCounters(ctx, filepath.Join(armDir, loadgen.EnginesAfterFile))
	st.Stop()
	if err != nil {
		return fmt.Errorf("%s: %w", loadgen.EnginesAfterFile, err)
	}
	return nil
}

// RecordRun writes the engines' and the hub's counters into a run's
// folder before or after it, so each run (each rate of a sweep) gets its
// own evictions and escapes.
func (a *armStack) RecordRun(ctx context.Context, runDir, phase string) error {
	st := a.running
	if st == nil {
		return errors.New("no stack is running")
	}
	engines, hub := loadgen.EnginesBeforeFile, loadgen.HubBeforeFile
	if phase == loadgen.PhaseAfter {
		engines, hub = loadgen.EnginesAfterFile, loadgen.HubAfterFile
	}
	a.writeHub(ctx, st, filepath.Join(runDir, hub))
	if err := st.WriteEngineCounters(ctx, filepath.Join(runDir, engines)); err != nil {
		return fmt.Errorf("%s: %w", engines, err)
	}
	return nil
}

// writeHub writes the hub's stargate_* counters and gauges to path as
// counter-file lines ("hub <series> <value>"). A failure is logged, not
// returned: the escapes then read n/a in the report.
func (a *armStack) writeHub(ctx context.Context, st *stack.Stack, path string) {
	ctx, cancel := context.WithTimeout(ctx, hubScrapeTimeout)
	defer cancel()
	fams, err := promscrape.Scrape(ctx, a.http, st.Endpoints().HubMetrics)
	if err == nil {
		err = os.WriteFile(path, hubCounters(fams), 0o600)
	}
	if err != nil {
		fmt.Fprintf(a.log, "loadgen campaign: hub counters not recorded in %s: %v\n", path, err)
	}
}

// hubCounters renders the hub's stargate_* counter and gauge series, by
// family name, as counter-file lines; histograms are left out (their
// buckets say nothing a comparison of arms reads).
func hubCounters(fams promscrape.Families) []byte {
	var b bytes.Buffer
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		fam := fams[name]
		if !strings.HasPrefix(name, "stargate_") {
			continue
		}
		for _, m := range fam.GetMetric() {
			var v float64
			switch {
			case m.Counter != nil:
				v = m.GetCounter().GetValue()
			case m.Gauge != nil:
				v = m.GetGauge().GetValue()
			default:
				continue
			}
			s := loadgen.Sample{Source: "hub", Name: name, Value: v}
			for _, l := range m.GetLabel() {
				s.Labels = append(s.Labels, loadgen.Label{Name: l.GetName(), Value: l.GetValue()})
			}
			b.WriteString(loadgen.FormatSample(s))
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// compareFlags are campaign's --compare settings.
type compareFlags struct {
	on             bool
	bin, stackLogs string
	// hubs is --hubs: hub replicas per arm's stack.
	hubs int
}

// maxHubs bounds --hubs: each replica is a process with a tunnel from
// every pylon.
const maxHubs = 8

// defaultBin is the folder of the running loadgen: `make build` puts every
// binary next to it.
func defaultBin() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return filepath.Dir(exe), nil
}

// newArmStack checks the --compare flags against the others and returns
// the campaign's stack.
func (cf *compareFlags) newArmStack(given func(flag string) bool, rf *runFlags, model string, log io.Writer) (*armStack, error) {
	if !cf.on {
		for _, f := range []string{"bin", "stack-logs", "hubs"} {
			if given(f) {
				return nil, bad("--%s only applies with --compare", f)
			}
		}
		return nil, nil
	}
	for _, f := range []string{"url", "api-key", "api-key-file"} {
		if given(f) {
			return nil, bad("--%s must not be given with --compare: the runs go to the stack it starts (--target gateway or hub) with its own credentials", f)
		}
	}
	if cf.hubs < 1 || cf.hubs > maxHubs {
		return nil, bad("--hubs %d: must be 1 to %d", cf.hubs, maxHubs)
	}
	fleet := stack.BenchFleet()
	if model != fleet.Model {
		return nil, bad("--model %q: the --compare fleet serves %q", model, fleet.Model)
	}
	if rf.model != "" && rf.model != fleet.Model {
		return nil, bad("--request-model %q: the --compare fleet serves %q", rf.model, fleet.Model)
	}
	bin := cf.bin
	if bin == "" {
		var err error
		if bin, err = defaultBin(); err != nil {
			return nil, fmt.Errorf("--bin: finding loadgen's own folder: %w", err)
		}
	}
	if missing := stack.MissingBinaries(bin); len(missing) > 0 {
		return nil, bad("--bin %s lacks %v: run `make build` first (or name the folder with --bin)", bin, missing)
	}
	return &armStack{bin: bin, logs: cf.stackLogs, target: rf.target, hubs: cf.hubs, http: &http.Client{}, log: log}, nil
}

// errorsOver lists the arm/suite results with more than max requests that
// did not succeed (summed over repeats).
func errorsOver(rep *loadgen.CampaignReport, limit int) error {
	var errs []error
	for _, a := range rep.Arms {
		for _, s := range rep.Suites {
			st, ok := rep.Results[a.Name][s.Key]
			if !ok {
				continue
			}
			if failed := st.Requests - st.OK; failed > limit {
				errs = append(errs, fmt.Errorf("arm %s, suite %s: %d of %d requests did not succeed (%d failed, %d skipped, %d aborted)",
					a.Name, s.Key, failed, st.Requests, st.Failed, st.Skipped, st.Aborted))
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("--max-errors %d exceeded:\n%w", limit, errors.Join(errs...))
}
