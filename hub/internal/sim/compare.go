package sim

import "sync"

// Compare runs every arm on its own fresh fleet (up to parallel at once;
// each run is single-threaded and independent, so the report does not
// depend on parallel) and returns the report in arm order.
func Compare(p *Prepared, fleet Fleet, arms []Arm, opts Options, parallel int) (*Report, error) {
	fleet = fleet.withDefaults()
	ceil := WorkloadCeiling(p)
	rep := &Report{Workload: p.Info(), Seed: opts.Seed, Fleet: fleet, Ceiling: ceil, Arms: make([]*ArmResult, len(arms))}
	for _, w := range opts.Warmup {
		rep.Warmup = append(rep.Warmup, w.Info())
	}
	errs := make([]error, len(arms))
	sem := make(chan struct{}, max(parallel, 1))
	var wg sync.WaitGroup
	for i := range arms {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rep.Arms[i], errs[i] = run(p, fleet, arms[i], opts, ceil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}
