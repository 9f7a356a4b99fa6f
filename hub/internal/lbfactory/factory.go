package lbfactory

import (
	"fmt"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lb/powerofn"
	"github.com/stargate-router/stargate/hub/internal/lb/prefixaffinity"
	"github.com/stargate-router/stargate/hub/internal/lb/pulsar"
	"github.com/stargate-router/stargate/hub/internal/lb/pwnw"
	"github.com/stargate-router/stargate/hub/internal/lb/random"
	"github.com/stargate-router/stargate/hub/internal/lb/roundrobin"
	"github.com/stargate-router/stargate/hub/internal/lb/wnw"
	"github.com/stargate-router/stargate/hub/internal/lbconfig"
)

// New builds a fresh load balancer for def. Each call returns a new
// instance with its own state (round-robin counter, ring and ranking
// caches); the resolver calls it once per routing target and definition.
func New(def *lbconfig.Definition) (lb.Picker, error) {
	e := def.Effective()
	switch def.Algorithm() {
	case lbconfig.PowerOfN:
		return powerofn.New(powerofn.Config{SampleCount: e.SampleCount, Comparator: e.Comparator})
	case lbconfig.Random:
		return random.New(), nil
	case lbconfig.RoundRobin:
		return roundrobin.New(), nil
	case lbconfig.Pulsar:
		return pulsar.New(pulsar.Config{Seed: e.Seed, ConsiderKVFreeTokens: e.ConsiderKVFreeTokens,
			RendezvousWeight: weight(e.RendezvousWeight), RTTTier: e.RTTTier})
	case lbconfig.WaitAndWiden:
		return wnw.New(waitAndWiden(e))
	case lbconfig.PulsarWaitAndWiden:
		c := pwnw.DefaultConfig()
		c.Config = waitAndWiden(e)
		c.UseComparator = false
		c.ConsiderKVFreeTokens = e.ConsiderKVFreeTokens
		c.RendezvousWeight = weight(e.RendezvousWeight)
		c.RTTTier = e.RTTTier
		c.BandWidenInterval, c.BandWidenSet = e.BandWidenInterval, e.BandWidenIntervalSet
		c.FallbackMaxQueued = e.FallbackMaxQueued
		return pwnw.New(c)
	case lbconfig.PrefixAffinity:
		return prefixaffinity.New(prefixaffinity.Config{Comparator: e.Comparator, SplitGuard: e.SplitGuard,
			LastClusterAffinity: e.LastClusterAffinity, PreferLastCluster: e.ReturningPrefersLastCluster,
			QueueOnSaturatedHolders: e.QueueOnSaturatedHolders, PrefillAware: e.PrefillAware})
	}
	return nil, fmt.Errorf("no load balancer for algorithm %v", def.Algorithm())
}

// waitAndWiden maps the wait-and-widen settings both W&W algorithms share.
func waitAndWiden(e *lbconfig.Effective) wnw.Config {
	return wnw.Config{
		Seed:                      e.Seed,
		UseComparator:             e.HasComparator,
		Comparator:                e.Comparator,
		VirtualNodes:              e.VirtualNodes,
		SelectionCount:            e.SelectionCount,
		QueueSLO:                  e.QueueSLO,
		QueueFloorMs:              ms(e.MaxQueueTimeFloor.Seconds()),
		QueueCeilMs:               ms(e.MaxQueueTimeCeil.Seconds()),
		BucketMs:                  ms(e.TTFTBucketSize.Seconds()),
		UnlockFactor:              e.NextBucketUnlockFactor,
		N:                         e.N,
		MaxQueued:                 e.MaxQueued,
		IgnoreQueueTime:           e.IgnoreQueueTime,
		IgnoreInputProcessingTime: e.IgnoreInputProcessingTime,
		AffinityWait:              e.CacheAffinityWait,
		InputTokensScale:          e.CacheAffinityInputTokensScale,
		LastClusterAffinity:       e.LastClusterAffinity,
		ReturningPrefersLast:      e.ReturningPrefersLastCluster,
		PrefixAffinity:            e.PrefixAffinity,
	}
}

func ms(seconds float64) float64 { return seconds * 1000 }

func weight(w lbconfig.RendezvousWeight) pulsar.Weight {
	if w == lbconfig.WeightLastMeanInputTPS {
		return pulsar.WeightLastMeanInputTPS
	}
	return pulsar.WeightMaxInputTPS
}
