package pulsar

import (
	"errors"
	"fmt"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

// Name is the algorithm's canonical name, used in labels and logs.
const Name = "pulsar"

// Weight selects the statistic a cluster's rendezvous score is proportional to
// (lb-config.json `rendezvous_weight`). The zero value is the default,
// WeightMaxInputTPS.
type Weight uint8

const (
	// WeightMaxInputTPS ("max-input-tps", the default) weighs a cluster by
	// the generation peak of its input throughput (Stats.MaxInputTPS). A
	// peak moves rarely, so key ownership stays put while load comes and
	// goes; 0 (not measured yet) keeps the cluster out of the ranking.
	WeightMaxInputTPS Weight = iota
	// WeightLastMeanInputTPS ("last-mean-input-tps") is the legacy weight,
	// Stats.LastMeanInputTPS, which drifts with every heartbeat.
	WeightLastMeanInputTPS
	numWeights
)

var weightNames = [numWeights]string{
	WeightMaxInputTPS:      "max-input-tps",
	WeightLastMeanInputTPS: "last-mean-input-tps",
}

// ErrUnknownWeight is wrapped by ParseWeight and UnmarshalText for a name that
// is not a rendezvous weight.
var ErrUnknownWeight = errors.New("unknown rendezvous weight")

// ParseWeight returns the weight with exactly this name (names are
// case-sensitive, as everywhere in lb-config.json).
func ParseWeight(name string) (Weight, error) {
	for w, n := range weightNames {
		if n == name {
			return Weight(w), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want max-input-tps or last-mean-input-tps)", ErrUnknownWeight, name)
}

// Valid reports whether w is one of the defined weights.
func (w Weight) Valid() bool { return w < numWeights }

// String returns the weight's configuration name.
func (w Weight) String() string {
	if w.Valid() {
		return weightNames[w]
	}
	return fmt.Sprintf("Weight(%d)", uint8(w))
}

// MarshalText returns the weight's configuration name.
func (w Weight) MarshalText() ([]byte, error) {
	if !w.Valid() {
		return nil, fmt.Errorf("invalid rendezvous weight %d", uint8(w))
	}
	return []byte(weightNames[w]), nil
}

// UnmarshalText parses a configuration name with ParseWeight, so a Weight
// decodes straight from JSON.
func (w *Weight) UnmarshalText(b []byte) error {
	v, err := ParseWeight(string(b))
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// Config is pulsar's configuration. The zero value is upstream Stargate's
// pulsar: no seed, no KV check, max-input-tps weights, no RTT tiers.
type Config struct {
	// Seed is mixed into every hash, so two deployments (or two algorithm
	// definitions) with different seeds spread the same keys differently.
	// Empty hashes exactly like an absent seed.
	Seed string `json:"seed"`
	// ConsiderKVFreeTokens skips clusters that report no KV metrics or fewer
	// free KV tokens than the request's input, walking further down the key's
	// ranking instead.
	ConsiderKVFreeTokens bool `json:"consider_kv_free_tokens"`
	// RendezvousWeight is the statistic scores are proportional to.
	RendezvousWeight Weight `json:"rendezvous_weight"`
	// RTTTier is rtt_tier_ms as a duration: clusters sorted by RTT form
	// tiers that break wherever two neighbours are more than RTTTier apart,
	// and a key's ranking takes the nearer tier first
	// (docs/design/algorithms.md#rtt-tiers). 0 ignores RTT, as upstream
	// Stargate does; lb-config.json's default is set by hub/internal/lbconfig.
	RTTTier time.Duration `json:"-"`
}

// DefaultConfig is the zero Config: no seed, no KV check, max-input-tps,
// no RTT tiers.
func DefaultConfig() Config { return Config{} }

// Validate reports an invalid field as an *lb.FieldError.
func (c Config) Validate() error {
	if !c.RendezvousWeight.Valid() {
		return &lb.FieldError{Algorithm: Name, Field: "rendezvous_weight",
			Problem: fmt.Sprintf("must be max-input-tps or last-mean-input-tps, got %v", c.RendezvousWeight)}
	}
	if c.RTTTier < 0 {
		return &lb.FieldError{Algorithm: Name, Field: "rtt_tier_ms", Problem: "must not be negative"}
	}
	return nil
}
