// Command loadgen generates the canonical workloads, replays them against
// the gateway or the hub, and reports what it measured; docs/loadgen.md
// explains the suites, the measurements and the campaign layout.
//
//	loadgen generate --suite sessions --seed 42 --out w.jsonl
//	loadgen run --workload w.jsonl --target gateway --url http://127.0.0.1:8080 --api-key KEY --out results/run1
//	loadgen report results/run1
//	loadgen campaign --suites sessions,mixed --arms arms.json --out results/ --target hub --url http://127.0.0.1:8000
//	loadgen campaign --compare --suites sessions,mixed --arms bench/compare/arms.json --out results/compare
//
// Every flag also reads a LOADGEN_* environment variable; run a
// subcommand with --help for the list.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/loadgen"
	"github.com/stargate-router/stargate/pkg/workload"
)

// version is set by the Makefile through -ldflags.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

const usage = `loadgen: generate canonical workloads, replay them against the gateway or
the hub, and report TTFT, latency, cache hits and cluster movement.

Usage:
  loadgen generate --suite NAME --seed N --out FILE [suite flags]
  loadgen run      --workload FILE --target gateway|hub --url URL [--api-key KEY] --out DIR
  loadgen report   DIR...   (re-render run or campaign folders from their requests.jsonl)
  loadgen campaign --suites a,b --arms arms.json --out DIR [run flags] [suite flags]
  loadgen campaign --compare --suites a,b --arms arms.json --out DIR   (a fresh stack per arm)
  loadgen version

Suites: smoke, capacity, sessions, high-context, mixed; and, linked by content
instead of session keys, shared-prefix, rag, anon-sessions, prefix-mix.
Run "loadgen <command> --help" for that command's flags and their LOADGEN_* variables.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "generate":
		err = generate(rest, getenv, stdout)
	case "run":
		err = runCmd(ctx, rest, getenv, stdout, stderr)
	case "report":
		err = report(rest, getenv, stdout)
	case "campaign":
		err = campaign(ctx, rest, getenv, stdout, stderr)
	case "version", "--version":
		b := loadgen.ReadBuildInfo(version)
		fmt.Fprintf(stdout, "loadgen %s %s %s\n", b.Version, b.Revision, b.GoVersion)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "loadgen: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case cli.IsHelp(err):
		return 0
	case errors.As(err, new(*usageError)):
		fmt.Fprintf(stderr, "loadgen %s: %v\n", cmd, err)
		return 2
	default:
		fmt.Fprintf(stderr, "loadgen %s: %v\n", cmd, err)
		return 1
	}
}

// usageError is bad input: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func bad(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

func parse(fs *cli.FlagSet, args []string, getenv func(string) string) error {
	if err := fs.Parse(args, getenv); err != nil {
		if cli.IsHelp(err) {
			return err
		}
		return &usageError{err}
	}
	return nil
}

// suiteFlags are the generator parameters shared by generate and campaign.
type suiteFlags struct {
	p        workload.SuiteParams
	duration time.Duration
}

func (s *suiteFlags) register(fs *cli.FlagSet) {
	fs.Uint64(&s.p.Seed, "seed", "LOADGEN_SEED", 42, "workload seed: the same seed and parameters give a byte-identical file; session ids, prompts and a campaign's run salts all derive from it")
	fs.String(&s.p.Salt, "salt", "LOADGEN_SALT", "", "mixed with --seed into every session id (prompt_cache_key, conversation id, x-multi-turn-session-id) and so every prompt: another salt, another set of keys")
	fs.String(&s.p.Model, "model", "LOADGEN_MODEL", "dummy-model", "model named in the workload (and every request)")
	fs.Float64(&s.p.Rate, "rate", "LOADGEN_RATE", 0, "open-loop target rate in req/s: capacity (0 = 8; in a campaign all of 8,16,24,32,48), mixed (0 = 12, split 2:1 hot/short), sessions (0 = closed loop on --workers; > 0 = open loop), shared-prefix (0 = 10), rag and anon-sessions (0 = 8), prefix-mix (0 = 12)")
	fs.Duration(&s.p.ThinkTime, "think-time", "LOADGEN_THINK_TIME", 0, "capacity, open-loop sessions, anon-sessions, rag, prefix-mix: least time between the scheduled sends of two turns of a conversation (0 = 2s)")
	fs.Duration(&s.duration, "duration", "LOADGEN_DURATION", 0, "capacity, mixed, shared-prefix, rag, prefix-mix: send window (0 = 120s for capacity, else 60s)")
	fs.Int(&s.p.Workers, "workers", "LOADGEN_WORKERS", 0, "closed-loop workers (0 = smoke 4, sessions 16, high-context 32)")
	fs.Int(&s.p.Sessions, "sessions", "LOADGEN_SESSIONS", 0, "sessions and anon-sessions: number of sessions (0 = 128)")
	fs.Int(&s.p.Turns, "turns", "LOADGEN_TURNS", 0, "sessions, anon-sessions and capacity: turns per session (0 = 6, 6 and 3); rag: most questions per conversation (0 = 3)")
	fs.Int(&s.p.Interleave, "interleave", "LOADGEN_INTERLEAVE", 0, "sessions: sessions a worker keeps open at once (0 = 2)")
	fs.Float64(&s.p.Scale, "scale", "LOADGEN_SCALE", 0, "multiply every prompt size (0 = 1; high-context --scale 0.1 fits a laptop)")
	fs.Int(&s.p.FirstTokens, "first-tokens", "LOADGEN_FIRST_TOKENS", 0, "mean first-message tokens (0 = suite default)")
	fs.Int(&s.p.TurnTokens, "turn-tokens", "LOADGEN_TURN_TOKENS", 0, "mean later-turn message tokens (0 = suite default)")
	fs.Int(&s.p.OutputTokens, "output-tokens", "LOADGEN_OUTPUT_TOKENS", 0, "mean reply tokens (0 = suite default)")
	fs.Float64(&s.p.AnonShare, "anon-share", "LOADGEN_ANON_SHARE", 0, "share of anonymous one-shot requests, 0..1 (0 = suite default, negative = none)")
	fs.String(&s.p.Arrival, "arrival", "LOADGEN_ARRIVAL", "", "open-loop arrivals: uniform or poisson (default: uniform for capacity and mixed, else poisson)")
	fs.Int(&s.p.Prompts, "prompts", "LOADGEN_PROMPTS", 0, "shared-prefix and prefix-mix: number of shared system prompts (0 = 64)")
	fs.Int(&s.p.PromptTokens, "prompt-tokens", "LOADGEN_PROMPT_TOKENS", 0, "shared-prefix and prefix-mix: mean system prompt size, each drawn within a third of it (0 = 3000: 2k to 4k tokens)")
	fs.Int(&s.p.Docs, "docs", "LOADGEN_DOCS", 0, "rag and prefix-mix: number of shared documents (0 = 32)")
	fs.Int(&s.p.DocTokens, "doc-tokens", "LOADGEN_DOC_TOKENS", 0, "rag and prefix-mix: mean document size, each drawn within a third of it (0 = 6000: 4k to 8k tokens)")
	fs.Float64(&s.p.Zipf, "zipf", "LOADGEN_ZIPF", 0, "shared-prefix, rag, prefix-mix: popularity exponent of the prompts and documents, the k-th most popular drawn with weight k^-zipf (0 = 1; negative = all alike)")
	fs.Float64(&s.p.FollowUps, "follow-ups", "LOADGEN_FOLLOW_UPS", 0, "rag and prefix-mix: share of rag conversations that ask 2 to --turns questions, 0..1 (0 = 0.3; negative = none)")
}

func (s *suiteFlags) params() workload.SuiteParams {
	p := s.p
	p.Duration = s.duration
	return p
}

func generate(args []string, getenv func(string) string, stdout io.Writer) error {
	var sf suiteFlags
	var suite, out string
	var blockTokens int
	fs := cli.New("loadgen generate", "loadgen generate: write a canonical suite's workload file (JSON Lines) and print its SHA-256 fingerprint and cache ceiling.", stdout)
	fs.String(&suite, "suite", "LOADGEN_SUITE", "", "suite: "+strings.Join(workload.Suites, ", "))
	fs.String(&out, "out", "LOADGEN_OUT", "", "workload file to write")
	fs.Int(&blockTokens, "block-tokens", "LOADGEN_BLOCK_TOKENS", workload.DefaultBlockTokens, "KV block size (tokens) the cache ceiling is counted in: the engines' (the mock engine's --block-size-tokens)")
	sf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if suite == "" {
		return bad("--suite is required (one of %s)", strings.Join(workload.Suites, ", "))
	}
	if out == "" {
		return bad("--out is required")
	}
	if blockTokens < 1 {
		return bad("--block-tokens: must be >= 1, got %d", blockTokens)
	}
	w, err := workload.Generate(suite, sf.params())
	if err != nil {
		return &usageError{err}
	}
	cacheable, total, err := workload.CacheCeiling(w, blockTokens)
	if err != nil {
		return bad("--block-tokens: %v", err)
	}
	fp, err := w.WriteFile(out)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(stdout, "%s: suite %s, seed %d, %s loop, %d requests, sha256 %s\n", out, suite, w.Header.Seed, w.Header.Mode, len(w.Requests), fp)
	share := 0.0
	if total > 0 {
		share = 100 * float64(cacheable) / float64(total)
	}
	fmt.Fprintf(stdout, "cache ceiling: %d of %d prompt tokens cacheable (%.1f %%) in %d-token blocks, replies modelled as %d bytes per token\n",
		cacheable, total, share, blockTokens, workload.CharsPerToken)
	return nil
}

// runFlags are the client and bounds flags shared by run and campaign.
type runFlags struct {
	target, url, apiKey, apiKeyFile, model string
	stream                                 bool
	maxRequests, retries, blockTokens      int
	timeout, deadline, backoff, every      time.Duration
	salt                                   string
}

func (r *runFlags) register(fs *cli.FlagSet) {
	fs.String(&r.target, "target", "LOADGEN_TARGET", loadgen.TargetGateway, "what --url is: gateway (client requests) or hub (adds x-model, x-input-tokens, x-cache-affinity-key, x-stargate-prompt-prefix)")
	fs.String(&r.url, "url", "LOADGEN_URL", "", "base URL, e.g. http://127.0.0.1:8080 (the /v1 paths are appended)")
	fs.String(&r.apiKey, "api-key", "LOADGEN_API_KEY", "", "gateway API key, sent as Authorization: Bearer (prefer --api-key-file)")
	fs.String(&r.apiKeyFile, "api-key-file", "LOADGEN_API_KEY_FILE", "", "file holding the gateway API key")
	fs.String(&r.model, "request-model", "LOADGEN_REQUEST_MODEL", "", "model sent in requests (default: the workload's)")
	fs.Bool(&r.stream, "stream", "LOADGEN_STREAM", true, "stream answers (SSE); false measures TTFT as the whole latency")
	fs.Int(&r.maxRequests, "max-requests", "LOADGEN_MAX_REQUESTS", 0, "send at most this many requests (0 = the whole workload)")
	fs.Duration(&r.timeout, "timeout", "LOADGEN_TIMEOUT", 0, "per-request timeout, retries included (0 = the workload's client_timeout_ms, else 120s)")
	fs.Duration(&r.deadline, "deadline", "LOADGEN_DEADLINE", 0, "overall run deadline; running requests are aborted (0 = none)")
	fs.Int(&r.retries, "retries", "LOADGEN_RETRIES", 0, "client retries of a request refused before its first byte (429, 502, 503, connection error)")
	fs.Duration(&r.backoff, "retry-backoff", "LOADGEN_RETRY_BACKOFF", 250*time.Millisecond, "pause before the first client retry, doubled each time")
	fs.Duration(&r.every, "progress-interval", "LOADGEN_PROGRESS_INTERVAL", 10*time.Second, "progress line interval when stderr is not a terminal (a terminal gets a redrawn bar)")
	fs.Int(&r.blockTokens, "block-tokens", "LOADGEN_BLOCK_TOKENS", workload.DefaultBlockTokens, "KV block size (tokens) the run's cache ceiling is counted in: the engines' (the mock engine's --block-size-tokens)")
}

func (r *runFlags) validate(wantURL bool) error {
	if r.target != loadgen.TargetGateway && r.target != loadgen.TargetHub {
		return bad("--target: want gateway or hub, got %q", r.target)
	}
	if wantURL {
		if r.url == "" {
			return bad("--url is required")
		}
		u, err := url.Parse(r.url)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("--url: want http(s)://host:port, got %q", r.url)
		}
		r.url = strings.TrimSuffix(strings.TrimSuffix(r.url, "/"), "/v1")
	}
	if r.apiKeyFile != "" {
		k, err := cli.ReadSecretFile(r.apiKeyFile)
		if err != nil {
			return bad("--api-key-file: %v", err)
		}
		r.apiKey = k
	}
	if r.target == loadgen.TargetGateway && r.apiKey == "" && wantURL {
		return bad("--api-key or --api-key-file is required with --target gateway")
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"timeout", r.timeout}, {"deadline", r.deadline}, {"retry-backoff", r.backoff}} {
		if d.v < 0 {
			return bad("--%s: must not be negative, got %v", d.flag, d.v)
		}
	}
	if r.every <= 0 {
		return bad("--progress-interval: must be > 0, got %v", r.every)
	}
	if r.maxRequests < 0 || r.retries < 0 {
		return bad("--max-requests and --retries must be >= 0")
	}
	if r.blockTokens < 1 {
		return bad("--block-tokens: must be >= 1, got %d", r.blockTokens)
	}
	return nil
}

// template builds the run template of the flags.
func (r *runFlags) template(stderr io.Writer) loadgen.RunSpec {
	clk := clock.Real{}
	return loadgen.RunSpec{
		Client: loadgen.Client{HTTP: loadgen.NewHTTPClient(), BaseURL: r.url, Target: r.target, APIKey: r.apiKey, Model: r.model,
			Stream: r.stream, Retries: r.retries, RetryBackoff: r.backoff, Clock: clk},
		Config: loadgen.Config{MaxRequests: r.maxRequests, Timeout: r.timeout, Deadline: r.deadline, Salt: r.salt, BlockTokens: r.blockTokens,
			Clock: clk},
		Meta:           loadgen.Meta{Loadgen: loadgen.ReadBuildInfo(version)},
		ProgressOut:    stderr,
		ProgressTTY:    loadgen.IsTerminal(stderr),
		ProgressEvery:  r.every,
		DefaultTimeout: defaultTimeout,
	}
}

// defaultTimeout applies when neither --timeout nor the workload sets one.
const defaultTimeout = 120 * time.Second

func runCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var rf runFlags
	var path, out string
	fs := cli.New("loadgen run", "loadgen run: replay a workload file and write run.json, requests.jsonl, report.md and plots to --out.", stdout)
	fs.String(&path, "workload", "LOADGEN_WORKLOAD", "", "workload file (loadgen generate)")
	fs.String(&out, "out", "LOADGEN_OUT", "", "results folder to write")
	fs.String(&rf.salt, "salt", "LOADGEN_SALT", "", "mixed into session ids and prompts so a repeat does not hit an earlier run's caches")
	rf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	if path == "" {
		return bad("--workload is required")
	}
	if out == "" {
		return bad("--out is required")
	}
	if err := rf.validate(true); err != nil {
		return err
	}
	w, fp, err := workload.ReadFile(path)
	if err != nil {
		return bad("--workload: %v", err)
	}
	spec := rf.template(stderr)
	spec.Workload, spec.Path, spec.Fingerprint, spec.Dir = w, path, fp, out
	rep, err := loadgen.Execute(ctx, spec)
	if err != nil {
		return err
	}
	s := rep.Stats
	fmt.Fprintf(stdout, "%s: %d requests, %d ok, %d failed (%d rejected); TTFT p50 %.1f ms p99 %.1f ms; cache hit %.1f %% (%.1f %% of the ceiling); copies per block across clusters %.2f; report %s\n",
		w.Header.Suite, s.Requests, s.OK, s.Failed, s.Rejected, s.All.TTFT.P50, s.All.TTFT.P99, s.All.CacheHitPct, s.All.CeilingPct, s.CopiesPerBlock,
		filepath.Join(out, loadgen.ReportFile))
	return nil
}

// report re-renders every run folder under the given folders, then any
// campaign summary.
func report(args []string, getenv func(string) string, stdout io.Writer) error {
	var dirs []string
	var flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--dir" || a == "-dir":
			flags = append(flags, a)
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		case strings.HasPrefix(a, "-"):
			flags = append(flags, a)
		default:
			dirs = append(dirs, a)
		}
	}
	var dir string
	fs := cli.New("loadgen report", "loadgen report DIR...: recompute statistics, report.md and plots of run folders (and campaign summaries) from requests.jsonl.", stdout)
	fs.String(&dir, "dir", "LOADGEN_REPORT_DIR", "", "a results folder (also accepted as plain arguments)")
	if err := parse(fs, flags, getenv); err != nil {
		return err
	}
	if dir != "" {
		dirs = append(dirs, dir)
	}
	if len(dirs) == 0 {
		return bad("name at least one results folder (or --dir)")
	}
	for _, d := range dirs {
		n := 0
		//nolint:gosec // G703: the operator names the folders to re-render
		err := filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() || e.Name() != loadgen.RunFile {
				return nil
			}
			if _, err := loadgen.Rerender(filepath.Dir(p)); err != nil {
				return err
			}
			n++
			return nil
		})
		if err != nil {
			return err
		}
		if err := rerenderCampaign(d); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: re-rendered %d run(s)\n", d, n)
	}
	return nil
}

func rerenderCampaign(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "campaign.json")) //nolint:gosec // G304: the operator's results folder
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	rep, err := loadgen.ReadCampaign(b)
	if err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, "campaign.json"), err)
	}
	return loadgen.Recollect(dir, rep)
}

func campaign(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var rf runFlags
	var sf suiteFlags
	var cf compareFlags
	var suites, armsPath, out, before, after string
	var repeats, maxErrors int
	var resume bool
	var sw sweepFlags
	fs := cli.New("loadgen campaign", `loadgen campaign: run every suite on every arm (each arm names a hub lb-config) and write per-arm results and a side-by-side summary.

With --compare it starts a fresh stack for every arm from the binaries in --bin (a gateway with
embedded Olric, the hub with the arm's lb-config, 4 clusters of 2 pylons of 2 mock engines: the
benchmark fleet of docs/benchmarks.md), empties the engines' caches, records versions.txt and
engines-before.txt in the arm's folder, runs the arm (recording the engines' and the hub's counters
around each run), records engines-after.txt and hub-after.txt and stops it all (also on failure or
Ctrl-C).

With --rates it runs every open-loop suite (capacity, sessions, mixed and the prefix suites) at each
rate, multiples of --capacity (given, or auto: measured first by a closed-loop run) or req/s, and
reports each arm's saturation point.`, stdout)
	fs.String(&suites, "suites", "LOADGEN_SUITES", "", "comma-separated suites; capacity expands to one workload per rate, capacity@R names one")
	fs.String(&armsPath, "arms", "LOADGEN_ARMS", "", `arms file: [{"name": "p2", "lb_config": "p2.json", "description": "...", "info": {...}}, ...]`)
	fs.String(&out, "out", "LOADGEN_OUT", "", "campaign results folder")
	fs.Int(&repeats, "repeats", "LOADGEN_REPEATS", 1, "runs per suite and arm (upstream Stargate's campaign: 3 for sessions, 2 for mixed)")
	fs.Bool(&resume, "resume", "LOADGEN_RESUME", false, "skip runs whose run.json is complete (and arms whose runs all are, hooks included)")
	fs.String(&before, "before-arm", "LOADGEN_BEFORE_ARM", "", "shell command run before each arm (env ARM_NAME, ARM_LB_CONFIG, RESULTS_DIR, CAMPAIGN_DIR), e.g. a stack restart")
	fs.String(&after, "after-arm", "LOADGEN_AFTER_ARM", "", "shell command run after each arm, same environment")
	fs.Bool(&cf.on, "compare", "LOADGEN_COMPARE", false, "start a fresh stack per arm and send the runs to its gateway (or hub, --target); excludes --url, --api-key(-file) and the hooks")
	fs.String(&cf.bin, "bin", "LOADGEN_BIN", "", "with --compare: folder holding hub, gateway, pylon and mock-engine (default: this loadgen's own folder)")
	fs.Int(&cf.hubs, "hubs", "LOADGEN_HUBS", 1, "with --compare: hub replicas per stack (every pylon tunnels to each, the gateway spreads requests over them; the hub counters recorded are the first replica's)")
	fs.String(&cf.stackLogs, "stack-logs", "LOADGEN_STACK_LOGS", "", "with --compare: the processes' logs go to DIR/<arm>/ (default: the arm's results folder)")
	fs.Int(&maxErrors, "max-errors", "LOADGEN_MAX_ERRORS", -1, "exit 1 when an arm's suite has more than N requests that did not succeed, summed over repeats (-1 = no limit)")
	sw.register(fs)
	rf.register(fs)
	sf.register(fs)
	if err := parse(fs, args, getenv); err != nil {
		return err
	}
	switch {
	case suites == "":
		return bad("--suites is required")
	case armsPath == "":
		return bad("--arms is required")
	case out == "":
		return bad("--out is required")
	case repeats < 1:
		return bad("--repeats: must be >= 1, got %d", repeats)
	case maxErrors < -1:
		return bad("--max-errors: must be >= 0, or -1 for no limit, got %d", maxErrors)
	}
	st, err := cf.newArmStack(fs.Set, &rf, sf.p.Model, stderr)
	if err != nil {
		return err
	}
	if err := rf.validate(st == nil); err != nil {
		return err
	}
	sweep, err := sw.sweep(fs.Set, strings.Split(suites, ","), sf.params())
	if err != nil {
		return err
	}
	var specs []loadgen.SuiteSpec
	if sweep == nil {
		if specs, err = loadgen.ExpandSuites(strings.Split(suites, ","), sf.params()); err != nil {
			return &usageError{err}
		}
	}
	arms, err := loadgen.ReadArms(armsPath)
	if err != nil {
		return bad("--arms: %v", err)
	}
	tmpl := rf.template(stderr)
	c := &loadgen.Campaign{Out: out, Arms: arms, Suites: specs, Sweep: sweep, Repeats: repeats, Resume: resume, BeforeArm: before, AfterArm: after,
		Template: tmpl, Build: loadgen.ReadBuildInfo(version), Log: stderr}
	if st != nil {
		// A nil *armStack in the interface would not be nil.
		c.Stack = st
	}
	if err := c.Validate(); err != nil {
		return &usageError{err}
	}
	rep, err := c.Run(ctx)
	if err != nil {
		return err
	}
	var md strings.Builder
	for _, s := range rep.Suites {
		fmt.Fprintf(&md, "\n## %s (fingerprint %s)\n\n", s.Key, s.Fingerprint[:12])
		loadgen.WriteSideBySide(&md, rep, s.Key)
	}
	loadgen.WriteArmCounters(&md, rep)
	loadgen.WriteSweeps(&md, rep)
	fmt.Fprint(stdout, md.String())
	fmt.Fprintf(stdout, "\nfull summary: %s\n", filepath.Join(out, "summary.md"))
	if maxErrors >= 0 {
		return errorsOver(rep, maxErrors)
	}
	return nil
}

// sweepFlags are campaign's rate-sweep settings.
type sweepFlags struct {
	rates, capacity             string
	probeWorkers, probeRequests int
}

// capacityAuto is the --capacity value that measures the capacity first.
const capacityAuto = "auto"

func (s *sweepFlags) register(fs *cli.FlagSet) {
	fs.String(&s.rates, "rates", "LOADGEN_RATES", "", "run the open-loop suites (capacity, sessions, mixed, shared-prefix, rag, anon-sessions, prefix-mix) at each of these rates: multiples of --capacity (0.5x,1x,2x) or req/s (20,40); smoke and high-context run once")
	fs.String(&s.capacity, "capacity", "LOADGEN_CAPACITY", "", "with --rates: the capacity figure in req/s the multiples refer to, or auto to measure it first with a closed-loop sessions run")
	fs.Int(&s.probeWorkers, "capacity-workers", "LOADGEN_CAPACITY_WORKERS", 64, "--capacity auto: closed-loop workers of the probe; at least the fleet's engine slots, so that it saturates")
	fs.Int(&s.probeRequests, "capacity-requests", "LOADGEN_CAPACITY_REQUESTS", 400, "--capacity auto: requests the probe sends")
}

// sweep checks the sweep flags and returns the campaign's sweep (nil
// without --rates).
func (s *sweepFlags) sweep(given func(string) bool, names []string, base workload.SuiteParams) (*loadgen.Sweep, error) {
	if s.rates == "" {
		for _, f := range []string{"capacity", "capacity-workers", "capacity-requests"} {
			if given(f) {
				return nil, bad("--%s only applies with --rates", f)
			}
		}
		return nil, nil
	}
	if given("rate") {
		return nil, bad("--rate and --rates exclude each other: --rates sets every swept suite's rate")
	}
	points, err := loadgen.ParseRates(s.rates)
	if err != nil {
		return nil, &usageError{err}
	}
	sw := &loadgen.Sweep{Names: names, Base: base, Points: points, Probe: loadgen.Probe{Workers: s.probeWorkers, Requests: s.probeRequests}}
	switch s.capacity {
	case "":
		for _, p := range points {
			if p.Multiple > 0 {
				return nil, bad("--rates %gx: a multiple needs --capacity <req/s> or --capacity %s", p.Multiple, capacityAuto)
			}
		}
	case capacityAuto:
		if s.probeWorkers < 1 || s.probeRequests < 1 {
			return nil, bad("--capacity-workers and --capacity-requests must be >= 1, got %d and %d", s.probeWorkers, s.probeRequests)
		}
	default:
		v, err := strconv.ParseFloat(s.capacity, 64)
		if err != nil || !(v > 0) || v > workload.MaxRate {
			return nil, bad("--capacity: want a rate in req/s > 0 or %s, got %q", capacityAuto, s.capacity)
		}
		sw.Capacity = v
	}
	// Catch a bad suite name now rather than after a capacity probe.
	if _, err := sw.Expand(1); err != nil {
		return nil, &usageError{err}
	}
	return sw, nil
}
