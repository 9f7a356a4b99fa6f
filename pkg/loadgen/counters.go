package loadgen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Counter files a stack records into an arm's folder (before and after
// the arm) and, with a RunRecorder, into each run's folder (before and
// after the run). Each line is one series as the process's /metrics shows
// it, prefixed by where it came from (FormatSample):
//
//	near-a mock_engine_kv_cache_evicted_blocks_total{model_name="dummy-model"} 12
//	hub stargate_session_escapes_total{model="dummy-model",reason="retry"} 3
const (
	EnginesBeforeFile = "engines-before.txt"
	EnginesAfterFile  = "engines-after.txt"
	HubBeforeFile     = "hub-before.txt"
	HubAfterFile      = "hub-after.txt"
)

// Series the reports read from the counter files.
const (
	evictedBlocksSeries = "mock_engine_kv_cache_evicted_blocks_total"
	prefixQueriesSeries = "vllm:prefix_cache_queries_total"
	prefixHitsSeries    = "vllm:prefix_cache_hits_total"
	// EscapesSeries is the hub's count of sessions that left their
	// cluster, by model and reason.
	EscapesSeries = "stargate_session_escapes_total"
)

// Sample is one line of a counter file.
type Sample struct {
	// Source is the process: a cluster id for an engine, "hub".
	Source string
	Name   string
	// Labels in the order the exposition gave them.
	Labels []Label
	Value  float64
}

// Label is one label of a Sample.
type Label struct{ Name, Value string }

// labelEscaper escapes a label value as the text exposition does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// FormatSample renders s as one counter-file line, without the newline.
func FormatSample(s Sample) string {
	var b strings.Builder
	b.WriteString(s.Source)
	b.WriteByte(' ')
	b.WriteString(s.Name)
	if len(s.Labels) > 0 {
		b.WriteByte('{')
		for i, l := range s.Labels {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(l.Name)
			b.WriteString(`="`)
			b.WriteString(labelEscaper.Replace(l.Value))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(strconv.FormatFloat(s.Value, 'g', -1, 64))
	return b.String()
}

// ParseCounters reads a counter file; blank lines are skipped, anything
// else that is not `<source> <name>[{labels}] <value>` is an error naming
// the line.
func ParseCounters(r io.Reader) ([]Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []Sample
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

var errSample = errors.New("want `<source> <name>[{labels}] <value>`")

func parseSample(line string) (Sample, error) {
	var s Sample
	src, rest, ok := strings.Cut(line, " ")
	if !ok || src == "" {
		return s, errSample
	}
	s.Source = src
	end := strings.IndexAny(rest, "{ ")
	if end <= 0 {
		return s, errSample
	}
	s.Name, rest = rest[:end], rest[end:]
	if rest[0] == '{' {
		var err error
		if s.Labels, rest, err = parseLabels(rest[1:]); err != nil {
			return s, err
		}
	}
	if len(rest) < 2 || rest[0] != ' ' {
		return s, errSample
	}
	v, err := strconv.ParseFloat(rest[1:], 64)
	if err != nil {
		return s, fmt.Errorf("value: %w", err)
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `name="value",...}` and returns what follows the
// closing brace.
func parseLabels(in string) ([]Label, string, error) {
	var labels []Label
	for {
		if strings.HasPrefix(in, "}") {
			return labels, in[1:], nil
		}
		if len(labels) > 0 {
			if !strings.HasPrefix(in, ",") {
				return nil, "", errors.New("labels: want ',' or '}'")
			}
			in = in[1:]
		}
		name, rest, ok := strings.Cut(in, `="`)
		if !ok || name == "" || strings.ContainsAny(name, ` ,{}"`) {
			return nil, "", errors.New(`labels: want name="value"`)
		}
		var v strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			c := rest[i]
			if c != '\\' {
				v.WriteByte(c)
				continue
			}
			if i++; i == len(rest) {
				break
			}
			switch rest[i] {
			case 'n':
				v.WriteByte('\n')
			case '\\', '"':
				v.WriteByte(rest[i])
			default:
				return nil, "", fmt.Errorf("labels: unknown escape \\%c", rest[i])
			}
		}
		if i >= len(rest) {
			return nil, "", errors.New("labels: unterminated value")
		}
		labels = append(labels, Label{Name: name, Value: v.String()})
		in = rest[i+1:]
	}
}

// label returns the value of s's label name, "" when it has none.
func (s *Sample) label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Counters is what the engines and the hub counted over a span (a run or
// a whole arm): the difference of the counter files written after and
// before it.
type Counters struct {
	// Engines is how many engines the files cover (0: no engine files,
	// and the engine fields mean nothing).
	Engines int `json:"engines"`
	// EvictedBlocks is the KV blocks the engines evicted from their
	// prefix caches, summed over engines.
	EvictedBlocks float64 `json:"evicted_blocks"`
	// PrefixQueryTokens and PrefixHitTokens are the prompt tokens the
	// engines looked up in their prefix caches and found there.
	PrefixQueryTokens float64 `json:"prefix_cache_query_tokens"`
	PrefixHitTokens   float64 `json:"prefix_cache_hit_tokens"`
	// Escapes is the hub's stargate_session_escapes_total by reason,
	// summed over models; nil when there is no hub file or the hub did not
	// export the series (the reports say n/a).
	Escapes map[string]float64 `json:"escapes,omitempty"`
}

// ReadCounters reads the counter files of dir (a run's or an arm's
// folder) and returns the differences; nil when dir holds none. A missing
// "before" file counts as zeros (a fresh stack's counters start there).
func ReadCounters(dir string) (*Counters, error) {
	read := func(name string) ([]Sample, bool, error) {
		f, err := os.Open(filepath.Join(dir, name)) //nolint:gosec // G304: the operator's results folder
		if errors.Is(err, os.ErrNotExist) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		defer func() { _ = f.Close() }()
		s, err := ParseCounters(f)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		return s, true, nil
	}
	var files [4][]Sample
	var found [4]bool
	for i, name := range []string{EnginesBeforeFile, EnginesAfterFile, HubBeforeFile, HubAfterFile} {
		var err error
		if files[i], found[i], err = read(name); err != nil {
			return nil, err
		}
	}
	if !found[1] && !found[3] {
		return nil, nil
	}
	c := &Counters{}
	if found[1] {
		engines := map[string]bool{}
		for _, s := range files[1] {
			engines[s.Source] = true
		}
		c.Engines = len(engines)
		c.EvictedBlocks = delta(files[0], files[1], evictedBlocksSeries)
		c.PrefixQueryTokens = delta(files[0], files[1], prefixQueriesSeries)
		c.PrefixHitTokens = delta(files[0], files[1], prefixHitsSeries)
	}
	if found[3] {
		c.Escapes = byLabel(files[2], files[3], EscapesSeries, "reason")
	}
	return c, nil
}

// seriesKey names one series of one source.
func seriesKey(s *Sample) string {
	return s.Source + " " + FormatSample(Sample{Name: s.Name, Labels: s.Labels})
}

// delta sums after − before over every series called name.
func delta(before, after []Sample, name string) float64 {
	var d float64
	for _, v := range byLabel(before, after, name, "") {
		d += v
	}
	return d
}

// byLabel is after − before of every series called name, summed by the
// value of label; nil when after has no such series. A series missing
// before counts from zero.
func byLabel(before, after []Sample, name, label string) map[string]float64 {
	prev := map[string]float64{}
	for i := range before {
		if before[i].Name == name {
			prev[seriesKey(&before[i])] = before[i].Value
		}
	}
	var out map[string]float64
	for i := range after {
		s := &after[i]
		if s.Name != name {
			continue
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[s.label(label)] += s.Value - prev[seriesKey(s)]
	}
	return out
}

// Add accumulates o into c (sums over runs). An Escapes map present on
// either side is kept; a reason missing from one side counts as zero.
func (c *Counters) Add(o *Counters) {
	if o == nil {
		return
	}
	c.Engines = max(c.Engines, o.Engines)
	c.EvictedBlocks += o.EvictedBlocks
	c.PrefixQueryTokens += o.PrefixQueryTokens
	c.PrefixHitTokens += o.PrefixHitTokens
	if o.Escapes != nil {
		if c.Escapes == nil {
			c.Escapes = map[string]float64{}
		}
		for k, v := range o.Escapes {
			c.Escapes[k] += v
		}
	}
}

// escapeReasons are the reasons the hub counts escapes by, in the order
// the reports list them; any other reason a hub reports follows, sorted.
var escapeReasons = []string{"new_not_waiting", "group_saturated", "cluster_lost", "retry"}

// reasonsOf lists the escape reasons to show for a set of Counters: the
// known ones, then any other seen, sorted.
func reasonsOf(cs ...*Counters) []string {
	extra := map[string]bool{}
	for _, c := range cs {
		if c == nil {
			continue
		}
		for r := range c.Escapes {
			if !slices.Contains(escapeReasons, r) {
				extra[r] = true
			}
		}
	}
	return append(slices.Clone(escapeReasons), slices.Sorted(maps.Keys(extra))...)
}

// escapesText is one cell: the escapes of reason, or n/a without the
// hub's series.
func escapesText(c *Counters, reason string) string {
	if c == nil || c.Escapes == nil {
		return "n/a"
	}
	return strconv.FormatFloat(c.Escapes[reason], 'f', -1, 64)
}

// escapesTotalText is every reason's escapes together, or n/a.
func escapesTotalText(c *Counters) string {
	if c == nil || c.Escapes == nil {
		return "n/a"
	}
	var t float64
	for _, v := range c.Escapes {
		t += v
	}
	return strconv.FormatFloat(t, 'f', -1, 64)
}

// evictedText is the engines' evicted blocks, or n/a without engine files.
func evictedText(c *Counters) string {
	if c == nil || c.Engines == 0 {
		return "n/a"
	}
	return strconv.FormatFloat(c.EvictedBlocks, 'f', -1, 64)
}
