package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/stargate-router/stargate/pkg/workload"
)

// SweepSuites are the suites a sweep runs at every rate: the ones whose
// workload has an open-loop rate (every prefix suite is open loop).
var SweepSuites = []string{workload.SuiteCapacity, workload.SuiteSessions, workload.SuiteMixed,
	workload.SuiteSharedPrefix, workload.SuiteRAG, workload.SuiteAnonSessions, workload.SuitePrefixMix}

// RatePoint is one rate of a sweep: Multiple times the capacity figure
// when Multiple > 0, else Rate requests per second.
type RatePoint struct {
	Multiple float64
	Rate     float64
}

// ParseRates reads --rates: comma-separated rates, each either a multiple
// of the capacity figure ("0.5x") or requests per second ("40").
func ParseRates(s string) ([]RatePoint, error) {
	var out []RatePoint
	seen := map[RatePoint]bool{}
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		num, multiple := strings.CutSuffix(f, "x")
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || !(v > 0) || v > workload.MaxRate {
			return nil, fmt.Errorf("--rates: %q: want a rate in req/s (40) or a multiple of --capacity (1.5x), > 0", f)
		}
		p := RatePoint{Rate: v}
		if multiple {
			p = RatePoint{Multiple: v}
		}
		if seen[p] {
			return nil, fmt.Errorf("--rates: %q given twice", f)
		}
		seen[p] = true
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("--rates: no rate given")
	}
	return out, nil
}

// needsCapacity reports whether any point is a multiple of the capacity.
func needsCapacity(points []RatePoint) bool {
	return slices.ContainsFunc(points, func(p RatePoint) bool { return p.Multiple > 0 })
}

// Sweep runs the rate-taking suites of a campaign (SweepSuites) at
// several rates, absolute or relative to a capacity figure that is given
// or measured first; the other suites run once, as without a sweep.
type Sweep struct {
	// Names are the campaign's --suites.
	Names []string
	// Base are the generator parameters every workload starts from.
	Base workload.SuiteParams
	// Points are the rates (--rates).
	Points []RatePoint
	// Capacity is the capacity figure in req/s (--capacity); 0 with a
	// multiple among Points measures it with Probe.
	Capacity float64
	// Probe says how to measure the capacity.
	Probe Probe
}

// Probe is the closed-loop run that measures capacity: the sessions
// suite (the campaign's sizes) on Workers workers, stopped after Requests
// requests; the capacity is its successful requests per second. With
// --compare it runs on a fresh stack with the first arm's lb config.
type Probe struct {
	Workers  int
	Requests int
}

// Capacity sources.
const (
	CapacityGiven    = "given"
	CapacityMeasured = "measured"
)

// CapacityRecord is the capacity figure a sweep's multiples refer to and
// how it was obtained; campaign.json keeps it, and --resume reuses a
// measured one so the rates stay those of the workloads already written.
type CapacityRecord struct {
	ReqPerS float64 `json:"req_per_s"`
	// Source is CapacityGiven or CapacityMeasured.
	Source string `json:"source"`
	// The probe, when measured: on which arm's stack, the suite and its
	// workload, the workers, and what the run saw.
	Arm         string  `json:"arm,omitempty"`
	Suite       string  `json:"suite,omitempty"`
	Workload    string  `json:"workload,omitempty"`
	Fingerprint string  `json:"fingerprint,omitempty"`
	Workers     int     `json:"workers,omitempty"`
	Requests    int     `json:"requests,omitempty"`
	OK          int     `json:"ok,omitempty"`
	DurationS   float64 `json:"duration_s,omitempty"`
	Run         string  `json:"run,omitempty"`
}

// Expand turns the sweep into the campaign's suite specs: one per rate
// for each rate-taking suite, keyed "<suite>-<m>x" for a multiple and
// "<suite>-<rate>" for a rate; capacity is the figure multiples refer to.
func (sw *Sweep) Expand(capacity float64) ([]SuiteSpec, error) {
	var out []SuiteSpec
	for _, n := range sw.Names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(SweepSuites, n) {
			if strings.Contains(n, "@") {
				return nil, fmt.Errorf("--suites: %q: a sweep (--rates) sets the rates; name the suite alone", n)
			}
			specs, err := ExpandSuites([]string{n}, sw.Base)
			if err != nil {
				return nil, err
			}
			out = append(out, specs...)
			continue
		}
		for _, pt := range sw.Points {
			p := sw.Base
			spec := SuiteSpec{Suite: n, Sweep: n, Multiple: pt.Multiple}
			if pt.Multiple > 0 {
				if !(capacity > 0) {
					return nil, fmt.Errorf("--rates %gx: needs a capacity figure (--capacity)", pt.Multiple)
				}
				p.Rate = pt.Multiple * capacity
				spec.Key = fmt.Sprintf("%s-%gx", n, pt.Multiple)
			} else {
				p.Rate = pt.Rate
				spec.Key = fmt.Sprintf("%s-%g", n, pt.Rate)
			}
			spec.Params = p
			out = append(out, spec)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--suites: no suite given")
	}
	return out, nil
}

// capacity resolves the sweep's capacity figure: given, recorded by the
// campaign being resumed, or measured by the probe; nil when no rate is a
// multiple and none was given.
func (c *Campaign) capacity(ctx context.Context) (*CapacityRecord, error) {
	sw := c.Sweep
	if sw.Capacity > 0 {
		return &CapacityRecord{ReqPerS: sw.Capacity, Source: CapacityGiven}, nil
	}
	if !needsCapacity(sw.Points) {
		return nil, nil
	}
	if c.Resume {
		if b, err := os.ReadFile(filepath.Join(c.Out, "campaign.json")); err == nil {
			if old, err := ReadCampaign(b); err == nil && old.Capacity != nil && old.Capacity.ReqPerS > 0 {
				fmt.Fprintf(c.Log, "loadgen campaign: capacity %.1f req/s (%s), from the campaign being resumed\n", old.Capacity.ReqPerS, old.Capacity.Source)
				return old.Capacity, nil
			}
		}
	}
	return c.probe(ctx)
}

// probeDir is where the capacity probe's workload, stack logs and run go.
const probeDir = "capacity-probe"

// probe measures the capacity with a short closed-loop saturating run.
func (c *Campaign) probe(ctx context.Context) (_ *CapacityRecord, err error) {
	pr := c.Sweep.Probe
	if pr.Workers < 1 || pr.Requests < 1 {
		return nil, fmt.Errorf("capacity probe: want workers and requests >= 1, got %d and %d", pr.Workers, pr.Requests)
	}
	dir := filepath.Join(c.Out, probeDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	p := c.Sweep.Base
	p.Rate, p.Workers = 0, pr.Workers
	w, err := workload.Generate(workload.SuiteSessions, p)
	if err != nil {
		return nil, fmt.Errorf("capacity probe: %w", err)
	}
	path := filepath.Join(dir, "workload.jsonl")
	fp, err := w.WriteFile(path)
	if err != nil {
		return nil, err
	}
	rec := &CapacityRecord{Source: CapacityMeasured, Suite: workload.SuiteSessions, Workload: path, Fingerprint: fp, Workers: pr.Workers}
	spec := c.Template
	if c.Stack != nil {
		arm := c.Arms[0]
		rec.Arm = arm.Name
		if arm.LBConfig, err = copyLBConfig(arm.LBConfig, dir); err != nil {
			return nil, err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), downTimeout)
			defer cancel()
			if derr := c.Stack.Down(dctx, dir); derr != nil && err == nil {
				err = fmt.Errorf("capacity probe: stopping the stack: %w", derr)
			}
		}()
		fmt.Fprintf(c.Log, "loadgen campaign: capacity probe: starting the stack with arm %s's lb config\n", arm.Name)
		target, upErr := c.Stack.Up(ctx, arm, dir)
		if upErr != nil {
			return nil, fmt.Errorf("capacity probe: starting the stack: %w", upErr)
		}
		spec.Client.BaseURL = target.URL
		if target.APIKey != "" {
			spec.Client.APIKey = target.APIKey
		}
	}
	spec.Workload, spec.Path, spec.Fingerprint, spec.Dir = w, path, fp, filepath.Join(dir, "run")
	spec.Config.MaxRequests = pr.Requests
	spec.Config.Salt = workload.NameTag(w.Header.Seed, saltOf(w)) + "-probe"
	spec.Meta.Arm, spec.Meta.Loadgen = probeDir, c.Build
	fmt.Fprintf(c.Log, "loadgen campaign: capacity probe: closed-loop sessions on %d workers, %d requests\n", pr.Workers, pr.Requests)
	rep, err := Execute(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("capacity probe: %w", err)
	}
	st := rep.Stats
	rec.ReqPerS, rec.Requests, rec.OK, rec.DurationS, rec.Run = st.ThroughputRPS, st.Requests, st.OK, st.DurationS, spec.Dir
	if !(rec.ReqPerS > 0) {
		return nil, fmt.Errorf("capacity probe: no request succeeded (%d sent, %d failed; results in %s)", st.Requests, st.Failed, spec.Dir)
	}
	fmt.Fprintf(c.Log, "loadgen campaign: capacity probe: %.1f ok req/s (%d of %d ok in %.1f s)\n", rec.ReqPerS, st.OK, st.Requests, st.DurationS)
	return rec, nil
}

// copyLBConfig copies an arm's lb config into dir and returns the copy's
// absolute path ("" for none): the bytes the arm (or probe) recorded are
// the bytes its hub read.
func copyLBConfig(src, dir string) (string, error) {
	if src == "" {
		return "", nil
	}
	b, err := os.ReadFile(src) //nolint:gosec // G304: the operator's arms file names it
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, "lb-config.json")
	if err := writeFile(dst, b); err != nil {
		return "", err
	}
	return filepath.Abs(dst)
}

// saltOf is the salt a workload was generated with.
func saltOf(w *workload.Workload) string {
	s, _ := w.Header.Params["salt"].(string)
	return s
}

// runSalt is the salt of repeat r of the campaign's workload key: derived
// from the workload's seed and salt, so two campaigns with different
// seeds share no request id, session id or prompt; distinct per key,
// because the points of a sweep send the same sessions and must not find
// each other's prompts in the caches of the stack they share; the same
// for every arm, so arms replay identical bytes.
func runSalt(w *workload.Workload, key string, r int) string {
	return fmt.Sprintf("%s-%s-r%d", workload.NameTag(w.Header.Seed, saltOf(w)), key, r)
}

// sweepGroups lists the swept suites of rep in order, each with its
// points sorted by target rate.
func sweepGroups(rep *CampaignReport) (names []string, points map[string][]CampaignSuite) {
	points = map[string][]CampaignSuite{}
	for _, s := range rep.Suites {
		if s.Sweep == "" {
			continue
		}
		if _, ok := points[s.Sweep]; !ok {
			names = append(names, s.Sweep)
		}
		points[s.Sweep] = append(points[s.Sweep], s)
	}
	for _, n := range names {
		slices.SortStableFunc(points[n], func(a, b CampaignSuite) int {
			switch {
			case a.TargetRate < b.TargetRate:
				return -1
			case a.TargetRate > b.TargetRate:
				return 1
			}
			return 0
		})
	}
	return names, points
}

// Saturation is the lowest rate of a sweep at which an arm's TTFT p99
// is at least twice its value at the sweep's lowest rate; "" when that
// never happens (or the lowest rate has no TTFT to compare with).
func Saturation(rep *CampaignReport, arm string, points []CampaignSuite) (key string, reached bool) {
	if len(points) == 0 {
		return "", false
	}
	base, ok := rep.Results[arm][points[0].Key]
	if !ok || base.All.TTFT.N == 0 || base.All.TTFT.P99 <= 0 {
		return "", false
	}
	for _, p := range points[1:] {
		st, ok := rep.Results[arm][p.Key]
		if ok && st.All.TTFT.N > 0 && st.All.TTFT.P99 >= 2*base.All.TTFT.P99 {
			return p.Key, true
		}
	}
	return "", false
}

// rateLabel names a sweep point: its multiple and rate.
func rateLabel(s CampaignSuite) string {
	if s.Multiple > 0 {
		return fmt.Sprintf("%gx (%s req/s)", s.Multiple, f1(s.TargetRate))
	}
	return f1(s.TargetRate) + " req/s"
}

// WriteSweeps writes, for every swept suite of rep, a table with one row
// per rate and arm, and each arm's saturation point.
func WriteSweeps(w io.Writer, rep *CampaignReport) {
	names, points := sweepGroups(rep)
	for _, n := range names {
		fmt.Fprintf(w, "\n## Sweep: %s\n\n", n)
		if c := rep.Capacity; c != nil {
			fmt.Fprintf(w, "Rates as multiples of a capacity of %s req/s (%s).\n\n", f1(c.ReqPerS), capacitySource(c))
		}
		fmt.Fprintf(w, "| rate | arm | achieved req/s | ok / failed | rejected | cache hit %% | cached %% of ceiling | copies per block | TTFT p50 ms | TTFT p99 ms | ok req/s | output tok/s | evicted blocks | escapes |\n")
		fmt.Fprintf(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range points[n] {
			for _, a := range rep.Arms {
				st, ok := rep.Results[a.Name][p.Key]
				if !ok {
					fmt.Fprintf(w, "| %s | %s | - | - | - | - | - | - | - | - | - | - | - | - |\n", rateLabel(p), a.Name)
					continue
				}
				fmt.Fprintf(w, "| %s | %s | %s | %d / %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", rateLabel(p), a.Name,
					f1(st.AchievedRate), st.OK, st.Requests-st.OK, st.Rejected, f1(st.All.CacheHitPct), ceilingText(&st.All), copiesText(&st),
					f1(st.All.TTFT.P50), f1(st.All.TTFT.P99), f1(st.ThroughputRPS), f1(st.OutputTPS),
					evictedText(st.Counters), escapesTotalText(st.Counters))
			}
		}
		fmt.Fprintf(w, "\nSaturation point (the lowest rate at which TTFT p99 is at least twice its value at %s):\n\n", rateLabel(points[n][0]))
		for _, a := range rep.Arms {
			key, ok := Saturation(rep, a.Name, points[n])
			label := "not reached"
			if ok {
				for _, p := range points[n] {
					if p.Key == key {
						label = rateLabel(p)
					}
				}
			}
			fmt.Fprintf(w, "- %s: %s\n", a.Name, label)
		}
	}
}

func capacitySource(c *CapacityRecord) string {
	if c.Source != CapacityMeasured {
		return "given with --capacity"
	}
	s := fmt.Sprintf("measured: %d of %d requests ok in %s s, closed-loop %s on %d workers", c.OK, c.Requests, f1(c.DurationS), c.Suite, c.Workers)
	if c.Arm != "" {
		s += ", on arm " + c.Arm + "'s stack"
	}
	return s
}
