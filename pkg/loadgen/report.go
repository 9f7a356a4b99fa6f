package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// File names inside a run folder.
const (
	RunFile      = "run.json"
	RecordsFile  = "requests.jsonl"
	ReportFile   = "report.md"
	TTFTPlot     = "ttft-cdf.svg"
	ClusterPlot  = "cluster-share.svg"
	FormatRunV1  = "loadgen-run/v1"
	clusterSlots = 20
)

// Meta describes a run: what was sent, where, and when.
type Meta struct {
	Format      string         `json:"format"`
	Suite       string         `json:"suite"`
	Workload    string         `json:"workload"`
	Fingerprint string         `json:"fingerprint"`
	Seed        uint64         `json:"seed"`
	Mode        string         `json:"mode"`
	Workers     int            `json:"workers,omitempty"`
	Params      map[string]any `json:"params,omitempty"`
	Target      string         `json:"target"`
	URL         string         `json:"url"`
	Model       string         `json:"model"`
	Stream      bool           `json:"stream"`
	Salt        string         `json:"salt,omitempty"`
	MaxRequests int            `json:"max_requests,omitempty"`
	// BlockTokens is the KV block size the run's cache ceiling was
	// counted in.
	BlockTokens int   `json:"block_tokens,omitempty"`
	TimeoutMs   int64 `json:"timeout_ms,omitempty"`
	DeadlineMs  int64 `json:"deadline_ms,omitempty"`
	// FileRequests is the workload's request count.
	FileRequests int       `json:"file_requests"`
	Started      time.Time `json:"started"`
	Finished     time.Time `json:"finished"`
	DurationMs   float64   `json:"duration_ms"`
	SendWindowMs float64   `json:"send_window_ms"`
	Arm          string    `json:"arm,omitempty"`
	Repeat       int       `json:"repeat,omitempty"`
	Loadgen      BuildInfo `json:"loadgen"`
	// Interrupted is a run stopped by a signal before it finished: its
	// results are written but it is never complete.
	Interrupted bool `json:"interrupted,omitempty"`
	// Complete is written true last: a run.json without it is a run that
	// did not finish writing, and campaign --resume runs it again.
	Complete bool `json:"complete"`
}

// RunReport is run.json: the meta and the statistics of one run.
type RunReport struct {
	Meta  Meta  `json:"meta"`
	Stats Stats `json:"stats"`
}

// BuildInfo identifies the loadgen binary that produced a result.
type BuildInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version,omitempty"`
	Revision  string `json:"vcs_revision,omitempty"`
	Modified  bool   `json:"vcs_modified,omitempty"`
}

// ReadBuildInfo returns version (set through -ldflags) with the VCS
// revision the Go toolchain stamped into the binary.
func ReadBuildInfo(version string) BuildInfo {
	b := BuildInfo{Version: version}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.GoVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// targetRate reads the workload's open-loop target rate from its params.
func targetRate(m *Meta) float64 {
	if m.Mode != "open" {
		return 0
	}
	v, _ := number(m.Params["target_rate"])
	return v
}

// number reads a numeric param, whether it was decoded from JSON (float64)
// or set by a generator (int, float64).
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}

// WriteRun writes a run folder: requests.jsonl, run.json (complete),
// report.md and the plots. It returns the report.
func WriteRun(dir string, meta Meta, out *Output) (*RunReport, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	meta.Format = FormatRunV1
	meta.Started, meta.Finished = out.Started, out.Finished
	meta.DurationMs = ms(out.Finished.Sub(out.Started))
	meta.SendWindowMs = ms(out.SendWindow)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range out.Records {
		if err := enc.Encode(&out.Records[i]); err != nil {
			return nil, err
		}
	}
	if err := writeFile(filepath.Join(dir, RecordsFile), buf.Bytes()); err != nil {
		return nil, err
	}
	return renderRun(dir, meta, out.Records)
}

// renderRun computes the statistics and writes run.json, report.md and
// the plots.
func renderRun(dir string, meta Meta, records []Record) (*RunReport, error) {
	meta.Complete = false
	st := Compute(records, meta.DurationMs/1000, meta.SendWindowMs/1000, targetRate(&meta))
	counters, err := ReadCounters(dir)
	if err != nil {
		return nil, err
	}
	st.Counters = counters
	rep := &RunReport{Meta: meta, Stats: st}
	if err := writeFile(filepath.Join(dir, TTFTPlot), []byte(TTFTCDF("TTFT CDF: "+runTitle(&meta), map[string][]float64{runTitle(&meta): okTTFTs(records)}))); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, ClusterPlot), []byte(ClusterShareOverTime("Cluster share over time: "+runTitle(&meta), records, clusterSlots))); err != nil {
		return nil, err
	}
	var md strings.Builder
	writeRunMarkdown(&md, rep)
	if err := writeFile(filepath.Join(dir, ReportFile), []byte(md.String())); err != nil {
		return nil, err
	}
	rep.Meta.Complete = !meta.Interrupted
	if err := writeJSON(filepath.Join(dir, RunFile), rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// ReadRecords reads requests.jsonl of a run folder.
func ReadRecords(dir string) ([]Record, error) {
	f, err := os.Open(filepath.Join(dir, RecordsFile)) //nolint:gosec // G304: the operator's results folder
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []Record
	br := bufio.NewReader(f)
	for line := 1; ; line++ {
		b, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(b)) > 0 {
			var r Record
			if jerr := json.Unmarshal(b, &r); jerr != nil {
				return nil, fmt.Errorf("%s line %d: %w", RecordsFile, line, jerr)
			}
			out = append(out, r)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// ReadRun reads run.json of a run folder; complete reports whether the
// run finished writing.
func ReadRun(dir string) (rep *RunReport, complete bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, RunFile)) //nolint:gosec // G304: the operator's results folder
	if err != nil {
		return nil, false, err
	}
	var r RunReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Join(dir, RunFile), err)
	}
	return &r, r.Meta.Complete && r.Meta.Format == FormatRunV1, nil
}

// Rerender recomputes a run folder's statistics, report and plots from
// its requests.jsonl (after a change of the statistics code, say).
func Rerender(dir string) (*RunReport, error) {
	rep, _, err := ReadRun(dir)
	if err != nil {
		return nil, err
	}
	records, err := ReadRecords(dir)
	if err != nil {
		return nil, err
	}
	return renderRun(dir, rep.Meta, records)
}

func runTitle(m *Meta) string {
	t := m.Suite
	if m.Arm != "" {
		t = m.Arm + " / " + t
	}
	if m.Repeat > 0 {
		t += fmt.Sprintf(" r%d", m.Repeat)
	}
	return t
}

func okTTFTs(records []Record) []float64 {
	var vs []float64
	for i := range records {
		if records[i].Outcome == OutcomeOK {
			vs = append(vs, records[i].TTFTMs)
		}
	}
	return vs
}

func writeFile(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil { //nolint:gosec // G703: paths under the operator's own --out folder
		return err
	}
	return os.Rename(tmp, path)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// copiesText is the copies per block across clusters, "-" when no block
// reached a known cluster.
func copiesText(s *Stats) string {
	if s.FleetBlocks == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", s.CopiesPerBlock)
}

// ceilingText is a class's cached tokens as a share of its ceiling, "-"
// when nothing was cacheable (or the records predate the ceiling).
func ceilingText(c *Class) string {
	if c.CacheableTokens == 0 {
		return "-"
	}
	return f1(c.CeilingPct)
}

// writeRunMarkdown renders one run (or an aggregate) for humans.
func writeRunMarkdown(w io.Writer, rep *RunReport) {
	m, s := &rep.Meta, &rep.Stats
	fmt.Fprintf(w, "# loadgen run: %s\n\n", runTitle(m))
	fmt.Fprintf(w, "| | |\n|---|---|\n")
	fmt.Fprintf(w, "| workload | `%s` (%s, seed %d, %s loop, %d requests) |\n", filepath.Base(m.Workload), m.Suite, m.Seed, m.Mode, m.FileRequests)
	fmt.Fprintf(w, "| fingerprint | `%s` |\n", m.Fingerprint)
	fmt.Fprintf(w, "| target | %s `%s` (model %s, stream %v) |\n", m.Target, m.URL, m.Model, m.Stream)
	fmt.Fprintf(w, "| started | %s |\n", m.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "| duration | %s s (send window %s s) |\n", f1(m.DurationMs/1000), f1(m.SendWindowMs/1000))
	fmt.Fprintf(w, "| loadgen | %s %s |\n\n", m.Loadgen.Version, m.Loadgen.Revision)
	writeStatsMarkdown(w, s)
	fmt.Fprintf(w, "\n![TTFT CDF](%s) ![cluster share](%s)\n", TTFTPlot, ClusterPlot)
}

// writeStatsMarkdown renders the tables of one Stats.
func writeStatsMarkdown(w io.Writer, s *Stats) {
	if s.Runs > 1 {
		fmt.Fprintf(w, "Aggregate of %d runs: counts are sums; rates, cache-hit %% and percentiles are medians of the per-run values.\n\n", s.Runs)
	}
	fmt.Fprintf(w, "| requests | ok | failed | rejected | skipped | aborted | retries | target req/s | achieved req/s | ok req/s | output tok/s |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	target := "-"
	if s.TargetRate > 0 {
		target = f1(s.TargetRate)
	}
	fmt.Fprintf(w, "| %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %s |\n\n", s.Requests, s.OK, s.Failed, s.Rejected, s.Skipped, s.Aborted, s.Retries,
		target, f1(s.AchievedRate), f1(s.ThroughputRPS), f1(s.OutputTPS))
	fmt.Fprintf(w, "Rejected: failed requests refused before their first byte (429, 502, 503, or no answer for another reason than loadgen's timeout).\n\n")
	fmt.Fprintf(w, "| class | requests | ok | cache hit %% | cached %% of ceiling | requests with a hit %% | TTFT p50 / p90 / p99 ms | latency p50 / p99 ms |\n|---|---|---|---|---|---|---|---|\n")
	row := func(name string, c Class) {
		fmt.Fprintf(w, "| %s | %d | %d | %s | %s | %s | %s / %s / %s | %s / %s |\n", name, c.Requests, c.OK, f1(c.CacheHitPct), ceilingText(&c),
			f1(c.HitSharePct), f1(c.TTFT.P50), f1(c.TTFT.P90), f1(c.TTFT.P99), f1(c.Latency.P50), f1(c.Latency.P99))
	}
	row("all", s.All)
	row("new (turn 1)", s.New)
	row("returning (turn > 1)", s.Returning)
	names := make([]string, 0, len(s.Streams))
	for k := range s.Streams {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		row("stream "+k, s.Streams[k])
	}
	fmt.Fprintf(w, "\nCache ceiling: %d of the %d prompt tokens of these requests were cacheable at all (an earlier request or its reply held them; "+
		"counted with an unbounded cache in the mock engine's blocks); %d were cached, %s %% of the ceiling.\n",
		s.All.CacheableTokens, s.All.PromptTokens, s.All.CachedTokens, ceilingText(&s.All))
	if s.FleetBlocks > 0 {
		fmt.Fprintf(w, "\nCopies per block across clusters: %s (%d distinct prompt blocks reached a known cluster, %d copies counted cluster by cluster; "+
			"evictions are ignored, so this bounds the copies held at once from above).\n", copiesText(s), s.FleetBlocks, s.ClusterBlocks)
	} else {
		fmt.Fprintf(w, "\nCopies per block across clusters: n/a (no request reached a known cluster).\n")
	}
	fmt.Fprintf(w, "\nDecode speed per request (tokens/s): p50 %s, p90 %s, p99 %s.\n\n", f1(s.DecodeTPS.P50), f1(s.DecodeTPS.P90), f1(s.DecodeTPS.P99))
	if c := s.Counters; c != nil {
		fmt.Fprintf(w, "During the run the engines evicted %s KV blocks and found %s of the %s prompt tokens they looked up in their prefix caches. ",
			evictedText(c), strconv.FormatFloat(c.PrefixHitTokens, 'f', -1, 64), strconv.FormatFloat(c.PrefixQueryTokens, 'f', -1, 64))
		if c.Escapes == nil {
			fmt.Fprintf(w, "Session escapes by reason: n/a (the hub does not export %s).\n\n", EscapesSeries)
		} else {
			parts := make([]string, 0, len(escapeReasons))
			for _, r := range reasonsOf(c) {
				parts = append(parts, r+" "+escapesText(c, r))
			}
			fmt.Fprintf(w, "Session escapes by reason (hub): %s.\n\n", strings.Join(parts, ", "))
		}
	}
	if len(s.Clusters) > 0 {
		fmt.Fprintf(w, "| cluster | requests | share %% |\n|---|---|---|\n")
		for _, c := range s.Clusters {
			name := c.Cluster
			if name == "" {
				name = "(unknown)"
			}
			fmt.Fprintf(w, "| %s | %d | %s |\n", name, c.Requests, f1(c.SharePct))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Sessions with a known cluster on ≥ 2 turns: %d; escaped (changed cluster between turns): %d; "+
		"followed (stayed on the new cluster for every later turn): %d of %d with a later turn; cluster changes: %d.\n",
		s.Sessions, s.Escaped, s.Followed, s.FollowEligible, s.Moves)
	if len(s.Errors) > 0 {
		keys := make([]string, 0, len(s.Errors))
		for k := range s.Errors {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int { return s.Errors[b] - s.Errors[a] })
		fmt.Fprintf(w, "\n| error | count |\n|---|---|\n")
		for i, k := range keys {
			if i == 10 {
				break
			}
			fmt.Fprintf(w, "| %s | %d |\n", strings.ReplaceAll(k, "|", "\\|"), s.Errors[k])
		}
	}
}
