package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	prommodel "github.com/prometheus/common/model"
)

// scrapeTimeout bounds each call to a child's HTTP API (a reset or a
// /metrics scrape); the children are on loopback and idle when it runs.
const scrapeTimeout = 5 * time.Second

// engineCounters are the engine series an arm records before and after its
// runs: the prefix-cache lookups and hits (in prompt tokens, vLLM's names)
// and the mock's cache size and evictions, so a reader can tell a cache
// that thrashed from one that was never asked.
var engineCounters = map[string]bool{
	"vllm:prefix_cache_hits_total":              true,
	"vllm:prefix_cache_queries_total":           true,
	"mock_engine_kv_cache_blocks":               true,
	"mock_engine_kv_cache_evicted_blocks_total": true,
}

// ResetCaches empties every engine's KV prefix cache (the mock's
// POST /test-control/kv-cache/reset). A fresh engine starts empty, but a
// pylon may have sent it calibration prompts at startup; after the reset
// every arm starts from the same empty caches. It does not zero the
// engines' counters: WriteEngineCounters records them before and after.
func (s *Stack) ResetCaches(ctx context.Context) error {
	var errs []error
	for _, id := range s.fleet.EngineIDs() {
		if _, err := s.call(ctx, http.MethodPost, s.ep.Engines[id]+"/test-control/kv-cache/reset"); err != nil {
			errs = append(errs, fmt.Errorf("resetting engine %s: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// WriteEngineCounters writes to path, for every engine in fleet order, its
// prefix-cache and KV-block series, one line each as its /metrics shows
// it, prefixed by the engine id (the cluster id when a cluster has one
// engine):
//
//	near-a vllm:prefix_cache_hits_total{model_name="dummy-model"} 1234
//
// An engine that cannot be read is left out and named in the error; the
// file holds the others.
func (s *Stack) WriteEngineCounters(ctx context.Context, path string) error {
	var out bytes.Buffer
	var errs []error
	for _, id := range s.fleet.EngineIDs() {
		if err := s.copySeries(ctx, &out, id, s.ep.Engines[id]+"/metrics", func(name string) bool { return engineCounters[name] }); err != nil {
			errs = append(errs, fmt.Errorf("engine %s: %w", id, err))
		}
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// WriteVersions writes to path the <binary>_build_info series of the hub,
// the gateway, the first pylon and its first engine (every pylon and
// engine runs the same binary), prefixed by which process it came from:
//
//	hub hub_build_info{version="v1.2.3"} 1
//
// A process that cannot be read is left out and named in the error.
func (s *Stack) WriteVersions(ctx context.Context, path string) error {
	first := s.fleet.Pylons()[0]
	sources := []struct{ name, url string }{
		{"hub", s.ep.HubMetrics},
		{"gateway", s.ep.GatewayMetrics},
		{"pylon-" + first.Name, s.ep.PylonMetrics[first.Name]},
		{"engine-" + first.Engines[0], s.ep.Engines[first.Engines[0]] + "/metrics"},
	}
	var out bytes.Buffer
	var errs []error
	for _, src := range sources {
		if err := s.copySeries(ctx, &out, src.name, src.url, func(name string) bool { return strings.HasSuffix(name, "_build_info") }); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src.name, err))
		}
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// copySeries scrapes url and writes every series of the families keep
// accepts to w, each line prefixed by prefix.
func (s *Stack) copySeries(ctx context.Context, w io.Writer, prefix, url string, keep func(name string) bool) error {
	body, err := s.call(ctx, http.MethodGet, url)
	if err != nil {
		return err
	}
	return writeSeries(w, prefix, bytes.NewReader(body), keep)
}

// writeSeries parses a text exposition and writes the samples of the
// families keep accepts, in the exposition's order (families by name,
// labels as given), as `<prefix> name{labels} value` lines: what a grep
// of the exposition would show.
func writeSeries(w io.Writer, prefix string, exposition io.Reader, keep func(name string) bool) error {
	parser := expfmt.NewTextParser(prommodel.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(exposition)
	if err != nil {
		return fmt.Errorf("parsing metrics: %w", err)
	}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		if !keep(name) {
			continue
		}
		for _, m := range fams[name].GetMetric() {
			labels := make([]string, 0, len(m.GetLabel()))
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+labelEscaper.Replace(l.GetValue())+`"`)
			}
			series := name
			if len(labels) > 0 {
				series += "{" + strings.Join(labels, ",") + "}"
			}
			// A sample is one of these; the others read as 0.
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			fmt.Fprintf(w, "%s %s %s\n", prefix, series, strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return nil
}

// labelEscaper escapes a label value as the text exposition format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// call sends one bodyless request and returns the 200 answer's body.
func (s *Stack) call(ctx context.Context, method, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: HTTP %d", method, url, resp.StatusCode)
	}
	return body, nil
}
