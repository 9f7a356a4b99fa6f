package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/olric-data/olric"

	"github.com/stargate-router/stargate/pkg/clock"
)

// Counter adds to named integer counters atomically. A counter that does
// not exist starts at 0 and disappears ttl after its creation.
type Counter interface {
	Add(ctx context.Context, key string, delta int64, ttl time.Duration) (int64, error)
}

// Local is the in-process Counter used without Olric: exact, per replica.
type Local struct {
	clock     clock.Clock
	mu        sync.Mutex
	m         map[string]*localEntry
	lastSweep time.Time
}

type localEntry struct {
	v       int64
	expires time.Time
}

var _ Counter = (*Local)(nil)

// NewLocal returns an empty Local counter on clk.
func NewLocal(clk clock.Clock) *Local {
	return &Local{clock: clk, m: map[string]*localEntry{}, lastSweep: clk.Now()}
}

// Add adds delta to key.
func (l *Local) Add(_ context.Context, key string, delta int64, ttl time.Duration) (int64, error) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	// Windows end and never come back, so a sweep every ttl keeps the map
	// at about two windows of keys.
	if now.Sub(l.lastSweep) >= ttl {
		for k, e := range l.m {
			if !now.Before(e.expires) {
				delete(l.m, k)
			}
		}
		l.lastSweep = now
	}
	e, ok := l.m[key]
	if !ok || !now.Before(e.expires) {
		e = &localEntry{expires: now.Add(ttl)}
		l.m[key] = e
	}
	e.v += delta
	return e.v, nil
}

// Len is the number of live keys, for tests.
func (l *Local) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

// Olric is the Counter over a cluster-client DMap: Incr and Decr are sent
// to the key's partition owner, where they run under the owner's key lock,
// so they are atomic across replicas. The embedded client's Incr is not:
// it is a Get and a Put under a lock local to the calling node, and on
// three nodes it admitted up to 3.3 times the limit in a measurement.
type Olric struct {
	DM olric.DMap
}

var _ Counter = Olric{}

// Add adds delta to key. The ttl argument is not used: Olric's Incr
// cannot set a TTL, so the DMap must give new keys theirs (olricnode's
// DMapTTL, KeyTTL for the gateway's rate-limit DMap), in the very write
// that creates them; later Incrs keep the remaining TTL they find.
//
// Neither Expire nor a Put NX creating the key with its TTL works with
// backups (--olric-replica-count 2 or more), both seen in
// TestOlricRateLimitMemberLoss. Olric v0.7.4's Expire sets the TTL on the
// owner's copy but sends the backups the whole entry with an empty value
// and a newer timestamp; reads take the newest copy, so the next Incr
// started again from 0 (a limit of 100 admitted 2222). And Put NX checks
// only the owner's copy: after the owner died, the new owner has none, so
// the Put NX succeeded and overwrote the backup's count with 0.
func (o Olric) Add(ctx context.Context, key string, delta int64, _ time.Duration) (int64, error) {
	var v int
	var err error
	if delta >= 0 {
		v, err = o.DM.Incr(ctx, key, int(delta))
	} else {
		v, err = o.DM.Decr(ctx, key, int(-delta))
	}
	return int64(v), err
}
