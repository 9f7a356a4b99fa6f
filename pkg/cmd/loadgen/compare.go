package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stargate-router/stargate/pkg/internal/stack"
	"github.com/stargate-router/stargate/pkg/loadgen"
)

// The files an arm's folder gets from its stack, besides the processes'
// logs.
const (
	versionsFile      = "versions.txt"
	enginesBeforeFile = "engines-before.txt"
	enginesAfterFile  = "engines-after.txt"
)

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
}

var _ loadgen.ArmStack = (*armStack)(nil)

// Up starts the stack with the arm's lb config, empties the engines'
// caches and records the binaries' versions and the engines' counters in
// armDir.
func (a *armStack) Up(ctx context.Context, arm loadgen.Arm, armDir string) (loadgen.ArmTarget, error) {
	logDir := armDir
	if a.logs != "" {
		logDir = filepath.Join(a.logs, arm.Name)
	}
	st, err := stack.Start(ctx, stack.Options{BinDir: a.bin, LogDir: logDir, Fleet: stack.BenchFleet(),
		LBConfigPath: arm.LBConfig, Principal: "bench"})
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
	if err := st.WriteEngineCounters(ctx, filepath.Join(armDir, enginesBeforeFile)); err != nil {
		return loadgen.ArmTarget{}, fmt.Errorf("%s: %w", enginesBeforeFile, err)
	}
	ep := st.Endpoints()
	if a.target == loadgen.TargetHub {
		// The hub trusts routing headers only from the gateway's token.
		return loadgen.ArmTarget{URL: ep.Hub, APIKey: ep.GatewayToken}, nil
	}
	return loadgen.ArmTarget{URL: ep.Gateway, APIKey: ep.APIKey}, nil
}

// Down records the engines' counters in armDir and stops the stack, also
// when recording fails.
func (a *armStack) Down(ctx context.Context, armDir string) error {
	st := a.running
	if st == nil {
		return nil
	}
	a.running = nil
	err := st.WriteEngineCounters(ctx, filepath.Join(armDir, enginesAfterFile))
	st.Stop()
	if err != nil {
		return fmt.Errorf("%s: %w", enginesAfterFile, err)
	}
	return nil
}

// compareFlags are campaign's --compare settings.
type compareFlags struct {
	on             bool
	bin, stackLogs string
}

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
func (cf *compareFlags) newArmStack(given func(flag string) bool, rf *runFlags, model string) (*armStack, error) {
	if !cf.on {
		for _, f := range []string{"bin", "stack-logs"} {
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
	return &armStack{bin: bin, logs: cf.stackLogs, target: rf.target}, nil
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
