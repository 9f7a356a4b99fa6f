package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// Fleet describes the simulated clusters: regions with their RTT to the
// hub, clusters of mock engines, and the pylon reporting cadence. It is the
// JSON of --fleet; DefaultFleet is used without one.
type Fleet struct {
	// Regions are the places clusters live in, each with its round-trip
	// time to the hub.
	Regions []Region `json:"regions"`
	// Clusters are the routing clusters, sorted by nothing in particular;
	// the hub sorts them by id.
	Clusters []Cluster `json:"clusters"`
	// BlockTokens is the KV cache block size of every engine (one geometry
	// for the whole fleet, so one prompt encoding fits every cache); 0
	// means 16, the mock engine's default.
	BlockTokens int `json:"block_tokens,omitempty"`
	// Pylon is the stats reporting model shared by every engine's pylon.
	Pylon Pylon `json:"pylon"`
}

// Region is a place with its RTT to the hub.
type Region struct {
	Name string `json:"name"`
	// RTTMs is the round trip between the hub and a pylon of this region:
	// the hub sees it as the cluster's RTT, a request pays half of it on the
	// way to the engine and half on the way back.
	RTTMs float64 `json:"rtt_ms"`
}

// Cluster is one routing cluster: Engines identical mock engines, each
// behind its own pylon (one backend per engine, as in upstream Stargate's
// published campaign, whose clusters were mock-engine + pylon pairs).
type Cluster struct {
	ID      string     `json:"id"`
	Region  string     `json:"region"`
	Engines int        `json:"engines"`
	Engine  EngineSpec `json:"engine"`
}

// EngineSpec is one mock engine's cost model (docs/mock-engine.md flags of
// the same names) and what its pylon reports about it.
type EngineSpec struct {
	// PrefillTPS is --prefill-tokens-per-s: the engine-wide cold prefill
	// rate shared by concurrent prefills; 0 makes cold prefill free.
	PrefillTPS float64 `json:"prefill_tokens_per_s"`
	// CachedPrefillTPS is --cached-prefill-tokens-per-s; 0 = free.
	CachedPrefillTPS float64 `json:"cached_prefill_tokens_per_s"`
	// TTFTMs is --ttft-ms, the base delay after prefill.
	TTFTMs float64 `json:"ttft_ms"`
	// TokenDelayMs is --token-delay-ms, per output token after the first.
	TokenDelayMs float64 `json:"token_delay_ms"`
	// MaxConcurrency is --max-concurrent-requests (0 = unlimited); more
	// requests wait in an unbounded FIFO.
	MaxConcurrency int `json:"max_concurrent_requests"`
	// KVCapacityTokens is --kv-cache-capacity-tokens (0 disables caching).
	KVCapacityTokens int64 `json:"kv_cache_capacity_tokens"`
	// ReportedInputTPS is the pylon's last_mean_input_tps and
	// max_input_tps (as with --pin-input-tps); 0 means PrefillTPS.
	ReportedInputTPS float64 `json:"reported_input_tps,omitempty"`
	// ReportMaxConcurrency makes the pylon publish MaxConcurrency as
	// max_engine_concurrency (pylon --max-engine-concurrency); false
	// publishes 0 (unknown), as upstream Stargate's pylon does.
	ReportMaxConcurrency bool `json:"report_max_concurrency"`
}

// Pylon is how every pylon reports: a full snapshot every IntervalMs, and
// (ChangeGapMs > 0) also as soon as its statistics change, but no sooner
// than ChangeGapMs after the previous one — our pylon's rule (50 ms); 0
// reports only on the interval, upstream Stargate's pylon's rule.
type Pylon struct {
	IntervalMs  float64 `json:"interval_ms"`
	ChangeGapMs float64 `json:"change_gap_ms"`
}

// DefaultFleet is two regions of two clusters each, two engines per
// cluster, with different prefill rates per cluster: mock-engine defaults
// otherwise (20 ms TTFT base, 10 ms per token, 1.6M tokens of KV), 25
// requests per engine reported as max_engine_concurrency, and our pylon's
// cadence (1 s, 50 ms after a change).
func DefaultFleet() Fleet {
	eng := func(cold, cached float64) EngineSpec {
		return EngineSpec{PrefillTPS: cold, CachedPrefillTPS: cached, TTFTMs: 20, TokenDelayMs: 10,
			MaxConcurrency: 25, KVCapacityTokens: 1_600_000, ReportMaxConcurrency: true}
	}
	return Fleet{
		Regions: []Region{{Name: "near", RTTMs: 2}, {Name: "far", RTTMs: 40}},
		Clusters: []Cluster{
			{ID: "near-a", Region: "near", Engines: 2, Engine: eng(64000, 133000)},
			{ID: "near-b", Region: "near", Engines: 2, Engine: eng(32000, 66500)},
			{ID: "far-a", Region: "far", Engines: 2, Engine: eng(64000, 133000)},
			{ID: "far-b", Region: "far", Engines: 2, Engine: eng(48000, 100000)},
		},
		BlockTokens: 16,
		Pylon:       Pylon{IntervalMs: 1000, ChangeGapMs: 50},
	}
}

// LoadFleet reads a fleet JSON file; unknown fields are rejected.
func LoadFleet(path string) (Fleet, error) {
	b, err := os.ReadFile(path) //nolint:gosec // G304: the operator's own flag
	if err != nil {
		return Fleet{}, err
	}
	return ParseFleet(b)
}

// ParseFleet decodes and validates a fleet.
func ParseFleet(b []byte) (Fleet, error) {
	var f Fleet
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return Fleet{}, fmt.Errorf("fleet: %w", err)
	}
	f = f.withDefaults()
	if err := f.Validate(); err != nil {
		return Fleet{}, err
	}
	return f, nil
}

func (f Fleet) withDefaults() Fleet {
	if f.BlockTokens == 0 {
		f.BlockTokens = 16
	}
	if f.Pylon.IntervalMs == 0 {
		f.Pylon.IntervalMs = 1000
	}
	return f
}

// Validate reports the first problem of the fleet.
func (f Fleet) Validate() error {
	if len(f.Clusters) == 0 {
		return errors.New("fleet: no clusters")
	}
	if f.BlockTokens < 1 {
		return fmt.Errorf("fleet: block_tokens %d, want ≥ 1", f.BlockTokens)
	}
	if !finiteNonNeg(f.Pylon.IntervalMs) || f.Pylon.IntervalMs <= 0 || !finiteNonNeg(f.Pylon.ChangeGapMs) {
		return errors.New("fleet: pylon interval_ms must be > 0 and change_gap_ms ≥ 0")
	}
	regions := map[string]bool{}
	for _, r := range f.Regions {
		if r.Name == "" || regions[r.Name] {
			return fmt.Errorf("fleet: region name %q empty or repeated", r.Name)
		}
		if !finiteNonNeg(r.RTTMs) {
			return fmt.Errorf("fleet: region %s: rtt_ms %v", r.Name, r.RTTMs)
		}
		regions[r.Name] = true
	}
	ids := map[string]bool{}
	for _, c := range f.Clusters {
		e := c.Engine
		switch {
		case c.ID == "" || ids[c.ID]:
			return fmt.Errorf("fleet: cluster id %q empty or repeated", c.ID)
		case !regions[c.Region]:
			return fmt.Errorf("fleet: cluster %s: unknown region %q", c.ID, c.Region)
		case c.Engines < 1:
			return fmt.Errorf("fleet: cluster %s: engines %d, want ≥ 1", c.ID, c.Engines)
		case !finiteNonNeg(e.PrefillTPS) || !finiteNonNeg(e.CachedPrefillTPS) || !finiteNonNeg(e.TTFTMs) ||
			!finiteNonNeg(e.TokenDelayMs) || !finiteNonNeg(e.ReportedInputTPS):
			return fmt.Errorf("fleet: cluster %s: rates and delays must be finite and ≥ 0", c.ID)
		case e.MaxConcurrency < 0 || e.KVCapacityTokens < 0:
			return fmt.Errorf("fleet: cluster %s: max_concurrent_requests and kv_cache_capacity_tokens must be ≥ 0", c.ID)
		}
		ids[c.ID] = true
	}
	return nil
}

func finiteNonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

// rtt returns the RTT of a cluster's region.
func (f *Fleet) rtt(c *Cluster) time.Duration {
	for _, r := range f.Regions {
		if r.Name == c.Region {
			return msDuration(r.RTTMs)
		}
	}
	return 0
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// reportedTPS is what the engine's pylon publishes as its input TPS.
func (e *EngineSpec) reportedTPS() float64 {
	if e.ReportedInputTPS > 0 {
		return e.ReportedInputTPS
	}
	return e.PrefillTPS
}

// prefillWork is the mock engine's solo prefill time for cold and cached
// tokens (pkg/mockengine Config.prefillWork, time scale 1).
func (e *EngineSpec) prefillWork(cold, cached int) time.Duration {
	var s float64
	if e.PrefillTPS > 0 {
		s += float64(cold) / e.PrefillTPS
	}
	if e.CachedPrefillTPS > 0 {
		s += float64(cached) / e.CachedPrefillTPS
	}
	return time.Duration(s * float64(time.Second))
}
