package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stargate-router/stargate/pkg/workload"
)

// Arm is one configuration of a comparison, as the arms file lists it.
type Arm struct {
	// Name names the arm's results folder: letters, digits, ".", "_", "-".
	Name string `json:"name"`
	// LBConfig is the hub lb-config (JSON) the arm runs with, relative to
	// the arms file; it is copied into the arm's folder.
	LBConfig string `json:"lb_config,omitempty"`
	// Description is free text for the report.
	Description string `json:"description,omitempty"`
	// Info is recorded as given (binary versions, stack notes, …).
	Info map[string]any `json:"info,omitempty"`
}

var armName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// ReadArms reads an arms file: a JSON array of Arm, or an object
// {"arms": [...]}. Relative lb_config paths are resolved against the
// file's folder and must exist.
func ReadArms(path string) ([]Arm, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's --arms file
	if err != nil {
		return nil, err
	}
	var arms []Arm
	if err := json.Unmarshal(b, &arms); err != nil {
		var wrapped struct {
			Arms []Arm `json:"arms"`
		}
		if err2 := json.Unmarshal(b, &wrapped); err2 != nil {
			return nil, fmt.Errorf("%s: want a JSON array of arms or {\"arms\": [...]}: %w", path, err)
		}
		arms = wrapped.Arms
	}
	if len(arms) == 0 {
		return nil, fmt.Errorf("%s: no arms", path)
	}
	seen := map[string]bool{}
	for i := range arms {
		a := &arms[i]
		if !armName.MatchString(a.Name) || a.Name == "." || a.Name == ".." {
			return nil, fmt.Errorf("%s: arm %d: name %q must be letters, digits, '.', '_' or '-'", path, i, a.Name)
		}
		if seen[a.Name] {
			return nil, fmt.Errorf("%s: arm name %q twice", path, a.Name)
		}
		seen[a.Name] = true
		if a.LBConfig != "" {
			if !filepath.IsAbs(a.LBConfig) {
				a.LBConfig = filepath.Join(filepath.Dir(path), a.LBConfig)
			}
			if _, err := os.Stat(a.LBConfig); err != nil {
				return nil, fmt.Errorf("%s: arm %q: lb_config: %w", path, a.Name, err)
			}
		}
	}
	return arms, nil
}

// SuiteSpec is one workload of a campaign: a suite with its parameters,
// under a key that names its folder ("sessions", "capacity-16").
type SuiteSpec struct {
	Key    string
	Suite  string
	Params workload.SuiteParams
	// Sweep is the suite a sweep point belongs to ("" outside a sweep);
	// Multiple its multiple of the capacity figure (0 for a rate given in
	// req/s).
	Sweep    string
	Multiple float64
}

// ExpandSuites turns suite names into specs. "capacity" becomes one spec
// per rate of workload.CapacityRates (or the one base.Rate when set);
// "capacity@R" names one rate.
func ExpandSuites(names []string, base workload.SuiteParams) ([]SuiteSpec, error) {
	var out []SuiteSpec
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		suite, rate, hasRate := strings.Cut(n, "@")
		if !slices.Contains(workload.Suites, suite) {
			return nil, fmt.Errorf("--suites: unknown suite %q (want one of %v)", suite, workload.Suites)
		}
		p := base
		switch {
		case hasRate && suite != workload.SuiteCapacity:
			return nil, fmt.Errorf("--suites: %q: only capacity takes @rate", n)
		case hasRate:
			r, err := strconv.ParseFloat(rate, 64)
			if err != nil || !(r > 0) {
				return nil, fmt.Errorf("--suites: %q: want capacity@<req/s>", n)
			}
			p.Rate = r
			out = append(out, SuiteSpec{Key: fmt.Sprintf("capacity-%g", r), Suite: suite, Params: p})
		case suite == workload.SuiteCapacity:
			rates := workload.CapacityRates
			if base.Rate > 0 {
				rates = []float64{base.Rate}
			}
			for _, r := range rates {
				p.Rate = r
				out = append(out, SuiteSpec{Key: fmt.Sprintf("capacity-%g", r), Suite: suite, Params: p})
			}
		default:
			out = append(out, SuiteSpec{Key: suite, Suite: suite, Params: p})
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--suites: no suite given")
	}
	return out, nil
}

// ArmTarget is where one arm's runs send their requests.
type ArmTarget struct {
	// URL is the base URL (the /v1 paths are appended).
	URL string
	// APIKey is sent as Authorization: Bearer; empty keeps the
	// template's.
	APIKey string
}

// ArmStack starts the system under test for one arm and stops it after
// the arm's runs, so every arm starts from fresh processes: empty KV
// caches and routing state.
type ArmStack interface {
	// Up starts the stack for arm, whose LBConfig then names the copy in
	// armDir (the bytes the arm records), and may record what it started
	// into armDir. It returns where the arm's runs go.
	Up(ctx context.Context, arm Arm, armDir string) (ArmTarget, error)
	// Down may record the stack's final state into armDir, then stops
	// everything Up started. The campaign calls it after every Up, also
	// after a failed Up or run and when ctx was cancelled (with a fresh
	// context then), so it must cope with a stack that never came up.
	Down(ctx context.Context, armDir string) error
}

// ErrStackAndHooks is returned by Campaign.Validate when a campaign has
// both a Stack and --before-arm/--after-arm hooks: two owners of the same
// processes.
var ErrStackAndHooks = errors.New("--compare starts and stops the stack itself: do not give --before-arm or --after-arm with it")

// downTimeout bounds an arm's Down: recording the engines' counters and
// stopping every process (whose grace period before SIGKILL is 10 s).
const downTimeout = 30 * time.Second

// Campaign runs every suite on every arm, Repeats times each.
type Campaign struct {
	Out     string
	Arms    []Arm
	Suites  []SuiteSpec
	Repeats int
	// Resume skips runs whose run.json is complete (and arms whose runs
	// all are, without starting their stack or running their hooks).
	Resume bool
	// BeforeArm and AfterArm are shell commands run before and after each
	// arm with ARM_NAME, ARM_LB_CONFIG, RESULTS_DIR (the arm's folder)
	// and CAMPAIGN_DIR in their environment.
	BeforeArm, AfterArm string
	// Stack, when set, is started before each arm and stopped after it;
	// the arm's runs go to the URL it returns. It excludes the hooks.
	Stack ArmStack
	// Sweep, when set, replaces Suites: its suites at its rates, after
	// the capacity figure is known (given, or measured first).
	Sweep *Sweep
	// Template is the run template: client, bounds, progress; Workload,
	// Dir and Meta.Arm/Repeat are set per run.
	Template RunSpec
	Build    BuildInfo
	// Log receives hook output and campaign progress lines.
	Log io.Writer
}

// CampaignFormatV1 marks campaign.json.
const CampaignFormatV1 = "loadgen-campaign/v1"

// CampaignReport is campaign.json: what ran and the aggregate statistics
// per arm and suite key.
type CampaignReport struct {
	Format   string                      `json:"format"`
	Started  time.Time                   `json:"started"`
	Finished time.Time                   `json:"finished,omitzero"`
	Loadgen  BuildInfo                   `json:"loadgen"`
	Repeats  int                         `json:"repeats"`
	Suites   []CampaignSuite             `json:"suites"`
	Arms     []Arm                       `json:"arms"`
	Results  map[string]map[string]Stats `json:"results"`
	// Capacity is the figure a sweep's multiples refer to.
	Capacity *CapacityRecord `json:"capacity,omitempty"`
	// ArmCounters is what the engines and the hub counted over each whole
	// arm (its folder's counter files), by arm name.
	ArmCounters map[string]*Counters `json:"arm_counters,omitempty"`
}

// CampaignSuite is one workload of the campaign, fingerprinted.
type CampaignSuite struct {
	Key         string `json:"key"`
	Suite       string `json:"suite"`
	Workload    string `json:"workload"`
	Fingerprint string `json:"fingerprint"`
	Requests    int    `json:"requests"`
	// Sweep, Multiple and TargetRate place a sweep point (SuiteSpec);
	// TargetRate is the workload's open-loop rate in req/s.
	Sweep      string  `json:"sweep,omitempty"`
	Multiple   float64 `json:"multiple,omitempty"`
	TargetRate float64 `json:"target_rate,omitempty"`
	// CeilingTokens of PromptTokens are the workload's cache ceiling
	// (workload.CacheCeiling, replies modelled), at BlockTokens.
	CeilingTokens int64 `json:"ceiling_tokens"`
	PromptTokens  int64 `json:"prompt_tokens"`
	BlockTokens   int   `json:"block_tokens"`
}

// ArmRecord is arm.json in an arm's folder.
type ArmRecord struct {
	Arm          Arm               `json:"arm"`
	Loadgen      BuildInfo         `json:"loadgen"`
	Fingerprints map[string]string `json:"fingerprints"`
	Started      time.Time         `json:"started"`
}

// Validate rejects a campaign that cannot run as configured.
func (c *Campaign) Validate() error {
	if c.Stack != nil && (c.BeforeArm != "" || c.AfterArm != "") {
		return ErrStackAndHooks
	}
	return nil
}

// Run generates (or reuses) the workloads, runs every arm and writes
// campaign.json, summary.md and the comparison plots.
func (c *Campaign) Run(ctx context.Context) (*CampaignReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Repeats < 1 {
		c.Repeats = 1
	}
	if err := os.MkdirAll(filepath.Join(c.Out, "workloads"), 0o750); err != nil {
		return nil, err
	}
	rep := &CampaignReport{Format: CampaignFormatV1, Started: time.Now().UTC(), Loadgen: c.Build, Repeats: c.Repeats, Arms: c.Arms,
		Results: map[string]map[string]Stats{}, ArmCounters: map[string]*Counters{}}
	if c.Sweep != nil {
		capRec, err := c.capacity(ctx)
		if err != nil {
			return nil, err
		}
		rep.Capacity = capRec
		var capacity float64
		if capRec != nil {
			capacity = capRec.ReqPerS
		}
		if c.Suites, err = c.Sweep.Expand(capacity); err != nil {
			return nil, err
		}
	}
	loads := map[string]*workload.Workload{}
	for _, s := range c.Suites {
		w, cs, err := c.workload(s)
		if err != nil {
			return nil, err
		}
		loads[s.Key] = w
		rep.Suites = append(rep.Suites, cs)
	}
	if err := writeJSON(filepath.Join(c.Out, "campaign.json"), rep); err != nil {
		return nil, err
	}
	for _, arm := range c.Arms {
		res, err := c.runArm(ctx, arm, rep.Suites, loads)
		rep.Results[arm.Name] = res
		if counters, cerr := ReadCounters(filepath.Join(c.Out, "arms", arm.Name)); cerr != nil {
			fmt.Fprintf(c.Log, "loadgen campaign: %s: %v\n", arm.Name, cerr)
		} else if counters != nil {
			rep.ArmCounters[arm.Name] = counters
		}
		if err != nil {
			_ = writeJSON(filepath.Join(c.Out, "campaign.json"), rep)
			return rep, fmt.Errorf("arm %s: %w", arm.Name, err)
		}
	}
	rep.Finished = time.Now().UTC()
	if err := writeJSON(filepath.Join(c.Out, "campaign.json"), rep); err != nil {
		return nil, err
	}
	return rep, RenderCampaign(c.Out, rep)
}

// workload generates the workload of s once per campaign; an existing
// file (an earlier or resumed campaign) is reused so every arm gets the
// same bytes.
func (c *Campaign) workload(s SuiteSpec) (*workload.Workload, CampaignSuite, error) {
	path := filepath.Join(c.Out, "workloads", s.Key+".jsonl")
	if _, err := os.Stat(path); err != nil {
		w, err := workload.Generate(s.Suite, s.Params)
		if err != nil {
			return nil, CampaignSuite{}, fmt.Errorf("suite %s: %w", s.Key, err)
		}
		if _, err := w.WriteFile(path); err != nil {
			return nil, CampaignSuite{}, err
		}
	}
	w, fp, err := workload.ReadFile(path)
	if err != nil {
		return nil, CampaignSuite{}, err
	}
	if w.Header.Suite != s.Suite {
		return nil, CampaignSuite{}, fmt.Errorf("%s holds suite %q, want %q: remove it or use another --out", path, w.Header.Suite, s.Suite)
	}
	bt := blockTokens(c.Template.Config.BlockTokens)
	ceiling, prompt, err := workload.CacheCeiling(w, bt)
	if err != nil {
		return nil, CampaignSuite{}, fmt.Errorf("--block-tokens: %w", err)
	}
	cs := CampaignSuite{Key: s.Key, Suite: s.Suite, Workload: path, Fingerprint: fp, Requests: len(w.Requests), Sweep: s.Sweep, Multiple: s.Multiple,
		CeilingTokens: ceiling, PromptTokens: prompt, BlockTokens: bt}
	if w.Header.Mode == workload.ModeOpen {
		cs.TargetRate, _ = number(w.Header.Params["target_rate"])
	}
	return w, cs, nil
}

func runDir(armDir, key string, repeat int) string {
	return filepath.Join(armDir, key, fmt.Sprintf("r%d", repeat))
}

func (c *Campaign) runArm(ctx context.Context, arm Arm, suites []CampaignSuite, loads map[string]*workload.Workload) (_ map[string]Stats, err error) {
	armDir := filepath.Join(c.Out, "arms", arm.Name)
	results := map[string]Stats{}
	pending := false
	for _, s := range suites {
		for r := 1; r <= c.Repeats; r++ {
			if _, ok, _ := ReadRun(runDir(armDir, s.Key, r)); !ok || !c.Resume {
				pending = true
			}
		}
	}
	if !pending {
		fmt.Fprintf(c.Log, "loadgen campaign: arm %s complete, skipped (--resume)\n", arm.Name)
		return collectArm(armDir, suites, c.Repeats)
	}
	if err := os.MkdirAll(armDir, 0o750); err != nil {
		return results, err
	}
	lbCopy, err := copyLBConfig(arm.LBConfig, armDir)
	if err != nil {
		return results, err
	}
	ar := ArmRecord{Arm: arm, Loadgen: c.Build, Fingerprints: map[string]string{}, Started: time.Now().UTC()}
	for _, s := range suites {
		ar.Fingerprints[s.Key] = s.Fingerprint
	}
	if err := writeJSON(filepath.Join(armDir, "arm.json"), ar); err != nil {
		return results, err
	}
	absArm, _ := filepath.Abs(armDir)
	absOut, _ := filepath.Abs(c.Out)
	env := []string{"ARM_NAME=" + arm.Name, "ARM_LB_CONFIG=" + arm.LBConfig, "RESULTS_DIR=" + absArm, "CAMPAIGN_DIR=" + absOut}
	if err := c.hook(ctx, "--before-arm", c.BeforeArm, env); err != nil {
		return results, err
	}
	tmpl := c.Template
	if c.Stack != nil {
		stackArm := arm
		stackArm.LBConfig = lbCopy // absolute: the stack's processes may run elsewhere than here
		if rr, ok := c.Stack.(RunRecorder); ok {
			tmpl.Recorder = rr
		}
		// Deferred, so the stack stops also when a run fails or panics;
		// with a fresh context, so it stops also after a Ctrl-C.
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), downTimeout)
			defer cancel()
			if derr := c.Stack.Down(dctx, armDir); derr != nil && err == nil {
				err = fmt.Errorf("stopping the stack: %w", derr)
			}
			fmt.Fprintf(c.Log, "loadgen campaign: %s: stack stopped\n", arm.Name)
		}()
		fmt.Fprintf(c.Log, "loadgen campaign: %s: starting the stack\n", arm.Name)
		started := time.Now()
		target, upErr := c.Stack.Up(ctx, stackArm, armDir)
		if upErr != nil {
			return results, fmt.Errorf("starting the stack: %w", upErr)
		}
		fmt.Fprintf(c.Log, "loadgen campaign: %s: stack up in %.1f s, runs go to %s\n", arm.Name, time.Since(started).Seconds(), target.URL)
		tmpl.Client.BaseURL = target.URL
		if target.APIKey != "" {
			tmpl.Client.APIKey = target.APIKey
		}
	}
	var runErr error
	for _, s := range suites {
		for r := 1; r <= c.Repeats && runErr == nil; r++ {
			dir := runDir(armDir, s.Key, r)
			if _, ok, _ := ReadRun(dir); ok && c.Resume {
				fmt.Fprintf(c.Log, "loadgen campaign: %s/%s r%d complete, skipped (--resume)\n", arm.Name, s.Key, r)
				continue
			}
			spec := tmpl
			spec.Workload, spec.Path, spec.Fingerprint, spec.Dir = loads[s.Key], s.Workload, s.Fingerprint, dir
			spec.Meta.Arm, spec.Meta.Repeat = arm.Name, r
			spec.Meta.Loadgen = c.Build
			// The same salt for every arm keeps their bytes identical;
			// a new one per workload and repeat keeps them from hitting
			// each other's caches; its seed part keeps campaigns apart.
			spec.Config.Salt = runSalt(spec.Workload, s.Key, r)
			fmt.Fprintf(c.Log, "loadgen campaign: %s/%s r%d: %d requests\n", arm.Name, s.Key, r, len(spec.Workload.Requests))
			rep, err := Execute(ctx, spec)
			if err != nil {
				runErr = fmt.Errorf("%s r%d: %w", s.Key, r, err)
				break
			}
			fmt.Fprintf(c.Log, "loadgen campaign: %s/%s r%d: ok %d/%d, rejected %d, TTFT p50 %s ms, cache hit %s %%, copies per block %s\n", arm.Name, s.Key, r,
				rep.Stats.OK, rep.Stats.Requests, rep.Stats.Rejected, f1(rep.Stats.All.TTFT.P50), f1(rep.Stats.All.CacheHitPct), copiesText(&rep.Stats))
		}
	}
	if err := c.hook(ctx, "--after-arm", c.AfterArm, env); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		return results, runErr
	}
	return collectArm(armDir, suites, c.Repeats)
}

// ReadCampaign parses campaign.json.
func ReadCampaign(b []byte) (*CampaignReport, error) {
	var rep CampaignReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, err
	}
	if rep.Format != CampaignFormatV1 {
		return nil, fmt.Errorf("format %q, want %q", rep.Format, CampaignFormatV1)
	}
	return &rep, nil
}

// Recollect re-aggregates every arm of a campaign folder from its run
// folders (after Rerender), rewrites campaign.json and renders the
// summary. Arms without complete results are left out of the tables.
func Recollect(out string, rep *CampaignReport) error {
	rep.Results = map[string]map[string]Stats{}
	rep.ArmCounters = map[string]*Counters{}
	for _, a := range rep.Arms {
		armDir := filepath.Join(out, "arms", a.Name)
		if counters, err := ReadCounters(armDir); err == nil && counters != nil {
			rep.ArmCounters[a.Name] = counters
		}
		res, err := collectArm(armDir, rep.Suites, rep.Repeats)
		if err != nil {
			continue
		}
		rep.Results[a.Name] = res
	}
	if err := writeJSON(filepath.Join(out, "campaign.json"), rep); err != nil {
		return err
	}
	return RenderCampaign(out, rep)
}

// collectArm aggregates the repeats of every suite of an arm and writes
// the suite summaries.
func collectArm(armDir string, suites []CampaignSuite, repeats int) (map[string]Stats, error) {
	results := map[string]Stats{}
	for _, s := range suites {
		var runs []Stats
		for r := 1; r <= repeats; r++ {
			rep, ok, err := ReadRun(runDir(armDir, s.Key, r))
			if err != nil || !ok {
				return results, fmt.Errorf("%s r%d: no complete result: %w", s.Key, r, err)
			}
			runs = append(runs, rep.Stats)
		}
		agg := Aggregate(runs)
		results[s.Key] = agg
		if err := writeJSON(filepath.Join(armDir, s.Key, "summary.json"), agg); err != nil {
			return results, err
		}
		var md strings.Builder
		fmt.Fprintf(&md, "# %s / %s: %d runs\n\nWorkload fingerprint `%s`.\n\n", filepath.Base(armDir), s.Key, len(runs), s.Fingerprint)
		writeStatsMarkdown(&md, &agg)
		if err := writeFile(filepath.Join(armDir, s.Key, "summary.md"), []byte(md.String())); err != nil {
			return results, err
		}
	}
	return results, nil
}

// hook runs a --before-arm/--after-arm command through sh -c.
func (c *Campaign) hook(ctx context.Context, flag, command string, env []string) error {
	if command == "" {
		return nil
	}
	fmt.Fprintf(c.Log, "loadgen campaign: %s: %s\n", flag, command)
	cmd := exec.CommandContext(ctx, "sh", "-c", command) //nolint:gosec // G204: the operator's own hook command
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s command failed: %w", flag, err)
	}
	return nil
}

// RenderCampaign writes summary.md and the comparison plots of a
// campaign from its report, and every run's TTFTs for the CDFs.
func RenderCampaign(out string, rep *CampaignReport) error {
	var md strings.Builder
	WriteCampaignMarkdown(&md, rep)
	if err := writeFile(filepath.Join(out, "summary.md"), []byte(md.String())); err != nil {
		return err
	}
	keys := make([]string, 0, len(rep.Suites))
	for _, s := range rep.Suites {
		keys = append(keys, s.Key)
	}
	names := make([]string, 0, len(rep.Arms))
	for _, a := range rep.Arms {
		names = append(names, a.Name)
	}
	hit := make([][]float64, len(names))
	for i, a := range names {
		for _, k := range keys {
			hit[i] = append(hit[i], rep.Results[a][k].All.CacheHitPct)
		}
	}
	if err := writeFile(filepath.Join(out, "cache-hit.svg"), []byte(BarChart("Cache-hit % per arm (median of runs)", "cache hit (%)", keys, names, hit, 100))); err != nil {
		return err
	}
	for _, k := range keys {
		sets := map[string][]float64{}
		for _, a := range names {
			for r := 1; r <= rep.Repeats; r++ {
				recs, err := ReadRecords(runDir(filepath.Join(out, "arms", a), k, r))
				if err != nil {
					continue
				}
				sets[a] = append(sets[a], okTTFTs(recs)...)
			}
		}
		if err := writeFile(filepath.Join(out, "ttft-cdf-"+k+".svg"), []byte(TTFTCDF("TTFT CDF per arm: "+k, sets))); err != nil {
			return err
		}
	}
	return nil
}

// WriteCampaignMarkdown renders the side-by-side table of the arms: one
// table per suite, one column per arm.
func WriteCampaignMarkdown(w io.Writer, rep *CampaignReport) {
	fmt.Fprintf(w, "# loadgen campaign\n\nStarted %s; %d repeat(s) per suite and arm. Counts are sums across repeats; rates, cache-hit %% and latency percentiles are medians of per-run values (nearest-rank percentiles).\n\n",
		rep.Started.Format(time.RFC3339), rep.Repeats)
	fmt.Fprintf(w, "| arm | lb config | description |\n|---|---|---|\n")
	for _, a := range rep.Arms {
		fmt.Fprintf(w, "| %s | %s | %s |\n", a.Name, a.LBConfig, a.Description)
	}
	if c := rep.Capacity; c != nil {
		fmt.Fprintf(w, "\nCapacity: %s req/s (%s).\n", f1(c.ReqPerS), capacitySource(c))
	}
	WriteArmCounters(w, rep)
	WriteSweeps(w, rep)
	for _, s := range rep.Suites {
		fmt.Fprintf(w, "\n## %s\n\nWorkload `%s`, %d requests, fingerprint `%s`", s.Key, filepath.Base(s.Workload), s.Requests, s.Fingerprint)
		if s.PromptTokens > 0 {
			fmt.Fprintf(w, "; cache ceiling %d of %d prompt tokens (%s %%, %d-token blocks, replies modelled as %d bytes per token)",
				s.CeilingTokens, s.PromptTokens, f1(100*float64(s.CeilingTokens)/float64(s.PromptTokens)), s.BlockTokens, workload.CharsPerToken)
		}
		fmt.Fprintf(w, ".\n\n")
		WriteSideBySide(w, rep, s.Key)
	}
	fmt.Fprintf(w, "\n![cache hit](cache-hit.svg)\n")
	for _, s := range rep.Suites {
		fmt.Fprintf(w, "![TTFT CDF %s](ttft-cdf-%s.svg)\n", s.Key, s.Key)
	}
}

// WriteArmCounters writes what the engines and the hub counted over each
// whole arm: evicted KV blocks, the engines' own prefix-cache hit rate
// and the hub's session escapes by reason (n/a when the hub does not
// export them). Nothing when no arm has counter files.
func WriteArmCounters(w io.Writer, rep *CampaignReport) {
	if len(rep.ArmCounters) == 0 {
		return
	}
	all := make([]*Counters, 0, len(rep.Arms))
	for _, a := range rep.Arms {
		all = append(all, rep.ArmCounters[a.Name])
	}
	reasons := reasonsOf(all...)
	fmt.Fprintf(w, "\n## Engines and hub over each arm\n\nDifferences of the arm's %s/%s and %s: the engines' evicted KV blocks and their own prefix-cache hit rate "+
		"(hit / looked-up prompt tokens), and the hub's %s by reason (n/a: not exported by this hub).\n\n",
		EnginesBeforeFile, EnginesAfterFile, HubAfterFile, EscapesSeries)
	fmt.Fprintf(w, "| arm | evicted blocks | engine prefix-cache hit %% |")
	for _, r := range reasons {
		fmt.Fprintf(w, " escapes %s |", r)
	}
	fmt.Fprintf(w, "\n|---|---|---|%s\n", strings.Repeat("---|", len(reasons)))
	for i, a := range rep.Arms {
		c := all[i]
		hit := "n/a"
		if c != nil && c.Engines > 0 && c.PrefixQueryTokens > 0 {
			hit = f1(100 * c.PrefixHitTokens / c.PrefixQueryTokens)
		}
		fmt.Fprintf(w, "| %s | %s | %s |", a.Name, evictedText(c), hit)
		for _, r := range reasons {
			fmt.Fprintf(w, " %s |", escapesText(c, r))
		}
		fmt.Fprintln(w)
	}
}

// WriteSideBySide writes one suite's metrics with one column per arm.
func WriteSideBySide(w io.Writer, rep *CampaignReport, key string) {
	fmt.Fprintf(w, "| metric |")
	for _, a := range rep.Arms {
		fmt.Fprintf(w, " %s |", a.Name)
	}
	fmt.Fprintf(w, "\n|---|")
	for range rep.Arms {
		fmt.Fprintf(w, "---|")
	}
	fmt.Fprintln(w)
	rows := []struct {
		name string
		f    func(*Stats) string
	}{
		{"requests (ok / failed)", func(s *Stats) string { return fmt.Sprintf("%d (%d / %d)", s.Requests, s.OK, s.Failed) }},
		{"rejected (429, 502, 503, refused)", func(s *Stats) string { return strconv.Itoa(s.Rejected) }},
		{"achieved req/s", func(s *Stats) string { return f1(s.AchievedRate) }},
		{"ok req/s", func(s *Stats) string { return f1(s.ThroughputRPS) }},
		{"output tok/s", func(s *Stats) string { return f1(s.OutputTPS) }},
		{"duration s", func(s *Stats) string { return f1(s.DurationS) }},
		{"cache hit %", func(s *Stats) string { return f1(s.All.CacheHitPct) }},
		{"cacheable tokens (ceiling)", func(s *Stats) string { return strconv.FormatInt(s.All.CacheableTokens, 10) }},
		{"cached % of ceiling", func(s *Stats) string { return ceilingText(&s.All) }},
		{"requests with a hit %", func(s *Stats) string { return f1(s.All.HitSharePct) }},
		{"returning cache hit %", func(s *Stats) string { return f1(s.Returning.CacheHitPct) }},
		{"copies per block across clusters", copiesText},
		{"TTFT p50 ms", func(s *Stats) string { return f1(s.All.TTFT.P50) }},
		{"TTFT p90 ms", func(s *Stats) string { return f1(s.All.TTFT.P90) }},
		{"TTFT p99 ms", func(s *Stats) string { return f1(s.All.TTFT.P99) }},
		{"latency p50 ms", func(s *Stats) string { return f1(s.All.Latency.P50) }},
		{"latency p99 ms", func(s *Stats) string { return f1(s.All.Latency.P99) }},
		{"sessions escaped / followed of eligible", func(s *Stats) string {
			return fmt.Sprintf("%d / %d of %d", s.Escaped, s.Followed, s.FollowEligible)
		}},
		{"engine evicted blocks", func(s *Stats) string { return evictedText(s.Counters) }},
		{"hub escapes (all reasons)", func(s *Stats) string { return escapesTotalText(s.Counters) }},
	}
	for _, row := range rows {
		fmt.Fprintf(w, "| %s |", row.name)
		for _, a := range rep.Arms {
			st, ok := rep.Results[a.Name][key]
			if !ok {
				fmt.Fprintf(w, " - |")
				continue
			}
			fmt.Fprintf(w, " %s |", row.f(&st))
		}
		fmt.Fprintln(w)
	}
}
