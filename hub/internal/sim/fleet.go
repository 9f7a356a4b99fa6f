package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/stargate-router/stargate/pkg/affinity"
)

// Fleet describes the simulated clusters: regions with their RTT to the
// hub, clusters of pylons with mock engines behind them, and how every
// pylon reports and spreads requests over its engines. It is the JSON of
// --fleet; DefaultFleet is used without one.
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
	// Pylon is the reporting and engine-choice model shared by every pylon.
	Pylon Pylon `json:"pylon"`
}

// Region is a place with its RTT to the hub.
type Region struct {
	Name string `json:"name"`
	// RTTMs is the round trip between the hub and a pylon of this region
	// as the hub measures it: the cluster's RTT in every routing decision.
	RTTMs float64 `json:"rtt_ms"`
	// TransitRTTMs is the round trip messages actually take: a request
	// pays half of it on the way to the engine and half on the way back,
	// and a pylon report reaches the hub half of it after it is sent.
	// Omitted, it is RTTMs. The benchmark fleet runs on one machine, where
	// the RTT is emulated (the engines delay the /health answers the hub
	// times, and add the same delay to their TTFT base), so messages take
	// no time and its fleet says 0.
	TransitRTTMs *float64 `json:"transit_rtt_ms,omitempty"`
}

// Cluster is one routing cluster: Pylons pylons (backends, as the hub
// sees them), each in front of EnginesPerPylon identical mock engines.
// The older form, Engines alone, means Engines pylons of one engine each
// (upstream Stargate's published campaign ran mock-engine + pylon pairs).
type Cluster struct {
	ID     string `json:"id"`
	Region string `json:"region"`
	// Engines is the one-engine-per-pylon form: that many pylons, one
	// engine behind each. It excludes Pylons and EnginesPerPylon.
	Engines int `json:"engines,omitempty"`
	// Pylons is the number of pylons (hub backends) of the cluster.
	Pylons int `json:"pylons,omitempty"`
	// EnginesPerPylon is the number of engines behind each pylon; 0
	// means 1.
	EnginesPerPylon int        `json:"engines_per_pylon,omitempty"`
	Engine          EngineSpec `json:"engine"`
}

// layout is the cluster's pylons and engines per pylon, whichever form
// the file used.
func (c *Cluster) layout() (pylons, perPylon int) {
	if c.Engines > 0 {
		return c.Engines, 1
	}
	return c.Pylons, max(c.EnginesPerPylon, 1)
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
	// ReportedInputTPS is each pylon's --initial-input-tps: the seed of
	// the input TPS it learns, or, with Pylon.PinInputTPS, what it
	// publishes as last_mean_input_tps and max_input_tps for good; 0
	// means PrefillTPS times the pylon's engines, what the benchmark fleet
	// seeds --initial-input-tps with.
	ReportedInputTPS float64 `json:"reported_input_tps,omitempty"`
	// ReportMaxConcurrency makes the pylon publish the slots of all its
	// engines together as max_engine_concurrency (pylon
	// --max-engine-concurrency); false publishes 0 (unknown), as upstream
	// Stargate's pylon does.
	ReportMaxConcurrency bool `json:"report_max_concurrency"`
}

// Engine affinity modes of a pylon with several engines (pylon
// --engine-affinity).
const (
	// EngineAffinityOn picks the engine by the request's affinity key
	// (pkg/affinity), the least loaded one for a request without a key.
	EngineAffinityOn = "on"
	// EngineAffinityOff picks the engine with the fewest outstanding
	// requests, ties round robin.
	EngineAffinityOff = "off"
)

// What an affinity pick does with an engine whose slots are all held
// (Pylon.EngineAffinityWhenFull).
const (
	// EngineFullSpill skips the full engine (pylon
	// --engine-affinity-when-full spill, its default): the key's request
	// goes to another engine of the pylon, which prefills the prompt cold
	// and keeps a second copy of it.
	EngineFullSpill = "spill"
	// EngineFullQueue keeps the key on its engine, where the request
	// waits for a slot in the engine's own queue; only the load bound
	// (and an engine that is down, which the simulator does not model)
	// moves it (pylon --engine-affinity-when-full queue): under
	// saturation the spill is what costs the holders of popular prompts
	// their cache.
	EngineFullQueue = "queue"
)

// Pylon is how every pylon reports and chooses an engine. It reports a
// full snapshot every IntervalMs, and (ChangeGapMs > 0) also as soon as
// its statistics change, but no sooner than ChangeGapMs after the
// previous one — our pylon's rule (50 ms); 0 reports only on the
// interval, upstream Stargate's pylon's rule. They change whenever the
// live pylon's collector says so: a request arrives, its response head
// or one of its output chunks passes, or it ends; so a pylon with a
// request streaming reports every ChangeGapMs.
type Pylon struct {
	IntervalMs  float64 `json:"interval_ms"`
	ChangeGapMs float64 `json:"change_gap_ms"`
	// EngineAffinity is "on" or "off" (pylon --engine-affinity); empty
	// means on.
	EngineAffinity string `json:"engine_affinity,omitempty"`
	// EngineAffinityLoadFactor is the bound of pkg/affinity (pylon
	// --engine-affinity-load-factor): an engine takes a key's request only
	// while its outstanding requests stay within factor × the average (plus
	// the request); 0 means pkg/affinity's default (2), a negative value
	// disables the bound.
	EngineAffinityLoadFactor float64 `json:"engine_affinity_load_factor,omitempty"`
	// EngineAffinityWhenFull is EngineFullSpill (empty means it, the
	// pylon's default) or EngineFullQueue (pylon
	// --engine-affinity-when-full): whether an affinity pick passes over
	// an engine whose slots are all held.
	EngineAffinityWhenFull string `json:"engine_affinity_when_full,omitempty"`
	// PinInputTPS makes every pylon publish its seed
	// (EngineSpec.ReportedInputTPS) as its input TPS for good, as the
	// pylon's --benchmark-pin-input-tps does. False, the pylon's default
	// and the benchmark fleet's, publishes what the pylon learns: the
	// running mean of its requests' input rates (pylonTPS).
	PinInputTPS bool `json:"pin_input_tps,omitempty"`
}

// Defaults of the built-in fleet, the live benchmark fleet's settings.
// The KV capacity is what every engine of the live fleet is started with;
// change it here and regenerate bench/compare/sim-fleet.json with
// --print-fleet when the live fleet changes.
const (
	// BenchKVCapacityTokens is each engine's --kv-cache-capacity-tokens.
	BenchKVCapacityTokens int64 = 65_536
	// BenchSlots is each engine's --max-concurrent-requests.
	BenchSlots = 8
	// BenchTokenDelayMs is each engine's --token-delay-ms.
	BenchTokenDelayMs = 5
	// benchTTFTBaseMs is the engines' TTFT base before the region's RTT is
	// added to it.
	benchTTFTBaseMs = 20
)

// DefaultFleet is the live benchmark fleet: two regions (near: 1 ms RTT,
// far: 25 ms) of two clusters each; every cluster has two pylons of two
// engines; each engine has 8 slots (reported), BenchKVCapacityTokens of
// KV cache, 5 ms per output token and a TTFT base of 20 ms plus its
// region's RTT; prefill rates (cold/cached tokens/s) near-a 2k/16k,
// near-b 1k/8k, far-a 1.5k/12k, far-b 2k/16k: slow enough that the fleet
// is prefill-bound at rates one machine can drive. Everything runs on one
// machine, so messages take no time (TransitRTTMs 0) and the RTT shows in
// the engines' TTFT base and in what the hub measures. Pylons report every
// 250 ms (the fleet's --min-update-interval-ms) and 50 ms after a change,
// and choose engines by affinity key with the default load factor.
func DefaultFleet() Fleet {
	zero := 0.0
	eng := func(rttMs, cold, cached float64) EngineSpec {
		return EngineSpec{PrefillTPS: cold, CachedPrefillTPS: cached, TTFTMs: benchTTFTBaseMs + rttMs,
			TokenDelayMs: BenchTokenDelayMs, MaxConcurrency: BenchSlots, KVCapacityTokens: BenchKVCapacityTokens,
			ReportMaxConcurrency: true}
	}
	cluster := func(id, region string, rttMs, cold, cached float64) Cluster {
		return Cluster{ID: id, Region: region, Pylons: 2, EnginesPerPylon: 2, Engine: eng(rttMs, cold, cached)}
	}
	return Fleet{
		Regions: []Region{{Name: "near", RTTMs: 1, TransitRTTMs: &zero}, {Name: "far", RTTMs: 25, TransitRTTMs: &zero}},
		Clusters: []Cluster{
			cluster("near-a", "near", 1, 2000, 16000),
			cluster("near-b", "near", 1, 1000, 8000),
			cluster("far-a", "far", 25, 1500, 12000),
			cluster("far-b", "far", 25, 2000, 16000),
		},
		BlockTokens: 16,
		Pylon: Pylon{IntervalMs: 250, ChangeGapMs: 50, EngineAffinity: EngineAffinityOn,
			EngineAffinityLoadFactor: affinity.DefaultLoadFactor},
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
	if dec.More() {
		return Fleet{}, errors.New("fleet: more than one JSON value")
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
	if f.Pylon.EngineAffinity == "" {
		f.Pylon.EngineAffinity = EngineAffinityOn
	}
	if f.Pylon.EngineAffinityLoadFactor == 0 {
		f.Pylon.EngineAffinityLoadFactor = affinity.DefaultLoadFactor
	}
	return f
}

// Validate reports the first problem of the fleet, naming the field.
func (f Fleet) Validate() error {
	if len(f.Clusters) == 0 {
		return errors.New("fleet: clusters: none")
	}
	if f.BlockTokens < 1 {
		return fmt.Errorf("fleet: block_tokens %d, want ≥ 1", f.BlockTokens)
	}
	if err := f.Pylon.validate(); err != nil {
		return err
	}
	regions := map[string]bool{}
	for i, r := range f.Regions {
		switch {
		case r.Name == "" || regions[r.Name]:
			return fmt.Errorf("fleet: regions[%d].name %q empty or repeated", i, r.Name)
		case !finiteNonNeg(r.RTTMs):
			return fmt.Errorf("fleet: regions[%d] (%s).rtt_ms %v, want finite and ≥ 0", i, r.Name, r.RTTMs)
		case r.TransitRTTMs != nil && !finiteNonNeg(*r.TransitRTTMs):
			return fmt.Errorf("fleet: regions[%d] (%s).transit_rtt_ms %v, want finite and ≥ 0", i, r.Name, *r.TransitRTTMs)
		}
		regions[r.Name] = true
	}
	ids := map[string]bool{}
	for i := range f.Clusters {
		c := &f.Clusters[i]
		if c.ID == "" || ids[c.ID] {
			return fmt.Errorf("fleet: clusters[%d].id %q empty or repeated", i, c.ID)
		}
		ids[c.ID] = true
		if err := c.validate(regions); err != nil {
			return fmt.Errorf("fleet: clusters[%d] (%s).%w", i, c.ID, err)
		}
	}
	return nil
}

func (p *Pylon) validate() error {
	switch {
	case !finiteNonNeg(p.IntervalMs) || p.IntervalMs <= 0:
		return fmt.Errorf("fleet: pylon.interval_ms %v, want > 0", p.IntervalMs)
	case !finiteNonNeg(p.ChangeGapMs):
		return fmt.Errorf("fleet: pylon.change_gap_ms %v, want ≥ 0", p.ChangeGapMs)
	case p.EngineAffinity != EngineAffinityOn && p.EngineAffinity != EngineAffinityOff:
		return fmt.Errorf("fleet: pylon.engine_affinity %q, want %q or %q", p.EngineAffinity, EngineAffinityOn, EngineAffinityOff)
	case math.IsNaN(p.EngineAffinityLoadFactor) || math.IsInf(p.EngineAffinityLoadFactor, 0) ||
		(p.EngineAffinityLoadFactor > 0 && p.EngineAffinityLoadFactor < 1):
		return fmt.Errorf("fleet: pylon.engine_affinity_load_factor %v, want ≥ 1 (or < 0: no load bound)", p.EngineAffinityLoadFactor)
	case p.EngineAffinityWhenFull != "" && p.EngineAffinityWhenFull != EngineFullSpill && p.EngineAffinityWhenFull != EngineFullQueue:
		return fmt.Errorf("fleet: pylon.engine_affinity_when_full %q, want %q or %q", p.EngineAffinityWhenFull, EngineFullSpill, EngineFullQueue)
	}
	return nil
}

// validate checks one cluster; the error starts with the field's name.
func (c *Cluster) validate(regions map[string]bool) error {
	e := &c.Engine
	switch {
	case !regions[c.Region]:
		return fmt.Errorf("region %q: not in regions", c.Region)
	case c.Engines < 0:
		return fmt.Errorf("engines %d, want ≥ 1", c.Engines)
	case c.Pylons < 0:
		return fmt.Errorf("pylons %d, want ≥ 1", c.Pylons)
	case c.EnginesPerPylon < 0:
		return fmt.Errorf("engines_per_pylon %d, want ≥ 1", c.EnginesPerPylon)
	case c.Engines > 0 && (c.Pylons > 0 || c.EnginesPerPylon > 0):
		return errors.New("engines: set engines (one engine per pylon) or pylons and engines_per_pylon, not both")
	case c.Engines == 0 && c.Pylons == 0:
		return errors.New("pylons: 0, want ≥ 1 (or engines ≥ 1)")
	case !finiteNonNeg(e.PrefillTPS):
		return fmt.Errorf("engine.prefill_tokens_per_s %v, want finite and ≥ 0", e.PrefillTPS)
	case !finiteNonNeg(e.CachedPrefillTPS):
		return fmt.Errorf("engine.cached_prefill_tokens_per_s %v, want finite and ≥ 0", e.CachedPrefillTPS)
	case !finiteNonNeg(e.TTFTMs):
		return fmt.Errorf("engine.ttft_ms %v, want finite and ≥ 0", e.TTFTMs)
	case !finiteNonNeg(e.TokenDelayMs):
		return fmt.Errorf("engine.token_delay_ms %v, want finite and ≥ 0", e.TokenDelayMs)
	case !finiteNonNeg(e.ReportedInputTPS):
		return fmt.Errorf("engine.reported_input_tps %v, want finite and ≥ 0", e.ReportedInputTPS)
	case e.MaxConcurrency < 0:
		return fmt.Errorf("engine.max_concurrent_requests %d, want ≥ 0", e.MaxConcurrency)
	case e.KVCapacityTokens < 0:
		return fmt.Errorf("engine.kv_cache_capacity_tokens %d, want ≥ 0", e.KVCapacityTokens)
	}
	return nil
}

func finiteNonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }

// region returns a cluster's region.
func (f *Fleet) region(c *Cluster) *Region {
	for i := range f.Regions {
		if f.Regions[i].Name == c.Region {
			return &f.Regions[i]
		}
	}
	return &Region{}
}

// rtt is the RTT the hub measures for a cluster.
func (f *Fleet) rtt(c *Cluster) time.Duration { return msDuration(f.region(c).RTTMs) }

// transit is the round trip messages to and from a cluster take.
func (f *Fleet) transit(c *Cluster) time.Duration {
	r := f.region(c)
	if r.TransitRTTMs != nil {
		return msDuration(*r.TransitRTTMs)
	}
	return msDuration(r.RTTMs)
}

func msDuration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

// reportedTPS is the input TPS a pylon of n such engines is seeded with
// (and publishes, pinned).
func (e *EngineSpec) reportedTPS(n int) float64 {
	if e.ReportedInputTPS > 0 {
		return e.ReportedInputTPS
	}
	return e.PrefillTPS * float64(n)
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
