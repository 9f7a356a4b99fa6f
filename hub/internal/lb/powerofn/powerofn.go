package powerofn

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "power-of-n"

// Sample count bounds and default (lb-config.json `sample_count`).
const (
	MinSampleCount     = 1
	MaxSampleCount     = 64
	DefaultSampleCount = 2
)

// Config is power-of-n's configuration. Start from DefaultConfig: the zero
// value is invalid, because sample_count 0 is an error, not "unset".
type Config struct {
	// SampleCount is how many clusters to compare, 1..64. Above the number of
	// selectable clusters it means all of them.
	SampleCount int `json:"sample_count"`
	// Comparator ranks the sampled clusters; the zero value is ttft.
	Comparator lb.Comparator `json:"comparator"`
}

// DefaultConfig is sample_count 2 with the ttft comparator.
func DefaultConfig() Config {
	return Config{SampleCount: DefaultSampleCount, Comparator: lb.ComparatorTTFT}
}

// Validate reports the first invalid field as an *lb.FieldError.
func (c Config) Validate() error {
	if c.SampleCount < MinSampleCount || c.SampleCount > MaxSampleCount {
		return &lb.FieldError{Algorithm: Name, Field: "sample_count",
			Problem: fmt.Sprintf("must be between %d and %d, got %d", MinSampleCount, MaxSampleCount, c.SampleCount)}
	}
	if !c.Comparator.Valid() {
		return &lb.FieldError{Algorithm: Name, Field: "comparator",
			Problem: fmt.Sprintf("must be one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued, got %v", c.Comparator)}
	}
	return nil
}

// Picker is a validated power-of-n load balancer. It is immutable and safe
// for concurrent use.
type Picker struct {
	sampleCount int
	comparator  lb.Comparator
}

var _ lb.Picker = (*Picker)(nil)

// New validates cfg and returns its Picker.
func New(cfg Config) (*Picker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Picker{sampleCount: cfg.SampleCount, comparator: cfg.Comparator}, nil
}

// SampleCount is the configured sample count (span field
// routing.sample_count_configured).
func (p *Picker) SampleCount() int { return p.sampleCount }

// Comparator is the configured comparator (span field routing.comparator).
func (p *Picker) Comparator() lb.Comparator { return p.comparator }

// String returns the canonical algorithm name.
func (p *Picker) String() string { return Name }

// Pick implements lb.Picker. The decision's Sampled is the effective sample
// count (span field routing.sample_count_effective) and its RankDepth is
// always 1.
func (p *Picker) Pick(req *routing.Request, snap *routing.Snapshot, _ time.Time, rng *rand.Rand) (routing.Decision, bool) {
	if snap == nil || len(snap.Clusters) == 0 {
		return routing.Decision{}, false
	}
	var buf [MaxSampleCount]int
	sample := p.sample(buf[:0], req, snap.Clusters, rng)
	if len(sample) == 0 {
		return routing.Decision{}, false
	}

	// Keep the best so far; on an equal score the newcomer replaces it with
	// probability 1/ties, which makes every tied cluster equally likely.
	best := sample[0]
	bestScore := p.comparator.Score(req, &snap.Clusters[best])
	ties := 1
	for _, i := range sample[1:] {
		s := p.comparator.Score(req, &snap.Clusters[i])
		switch s.Compare(bestScore) {
		case -1:
			best, bestScore, ties = i, s, 1
		case 0:
			ties++
			if rng.IntN(ties) == 0 {
				best, bestScore = i, s
			}
		}
	}
	d := lb.NewDecision(snap, best, 1, req)
	d.Sampled = len(sample)
	return d, true
}

// sample appends to dst the indices to compare, drawing exactly as upstream
// Stargate does so that a seeded run draws the same way every time:
//   - no exclusions: k = min(sample_count, n); k=1 is one uniform index, k=2 a
//     uniform distinct pair, k=n every index in order, anything else a uniform
//     k-subset by reservoir sampling;
//   - with exclusions (any non-empty list, even of unknown ids): a reservoir
//     sample of up to sample_count among the clusters not excluded.
func (p *Picker) sample(dst []int, req *routing.Request, clusters []routing.ClusterView, rng *rand.Rand) []int {
	n := len(clusters)
	if len(req.Excluded) == 0 {
		k := min(p.sampleCount, n)
		switch k {
		case 1:
			return append(dst, rng.IntN(n))
		case 2:
			a := rng.IntN(n)
			b := rng.IntN(n - 1)
			if b >= a {
				b++
			}
			return append(dst, a, b)
		case n:
			for i := range n {
				dst = append(dst, i)
			}
			return dst
		}
		return reservoir(dst, k, n, nil, rng)
	}
	return reservoir(dst, p.sampleCount, n, func(i int) bool { return req.IsExcluded(clusters[i].ClusterID) }, rng)
}

// reservoir appends a uniform sample of up to k of the indices 0..n-1 that
// skip does not reject (Algorithm R: the first k fill the reservoir, then the
// j-th eligible index replaces a uniform slot with probability k/j).
func reservoir(dst []int, k, n int, skip func(int) bool, rng *rand.Rand) []int {
	seen := 0
	for i := range n {
		if skip != nil && skip(i) {
			continue
		}
		if seen < k {
			dst = append(dst, i)
		} else if j := rng.IntN(seen + 1); j < k {
			dst[j] = i
		}
		seen++
	}
	return dst
}
