package lastcluster

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"time"

	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/olric-data/olric"
)

// Store holds cluster ids by key. Get reports found == false on a miss;
// an error is a store failure (the tracker treats both as "no hint").
type Store interface {
	Get(ctx context.Context, key string) (value string, found bool, err error)
	Set(ctx context.Context, key, value string, ttl time.Duration) error
}

// Key is lc:v1: + hex SHA-256 over the length-prefixed routing key, model
// and affinity key. Each field is an 8-byte big-endian
// length followed by its bytes, so ("ab","c") and ("a","bc") differ. The
// encoding is part of the shared DMap's contract: change it only together
// with the v1 tag.
func Key(routingKey, model, affinityKey string) string {
	h := sha256.New()
	var n [8]byte
	for _, f := range [...]string{routingKey, model, affinityKey} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var sum [sha256.Size]byte
	return "lc:v1:" + hex.EncodeToString(h.Sum(sum[:0]))
}

// LRU is the in-process store used when Olric is off: per replica only,
// capped, with one TTL for every entry (a Set renews it).
type LRU struct {
	c *expirable.LRU[string, string]
}

var _ Store = (*LRU)(nil)

// NewLRU returns an LRU of at most maxEntries entries living ttl. The
// library starts a reaper goroutine that lives as long as the process, so
// build one per process.
func NewLRU(maxEntries int, ttl time.Duration) *LRU {
	return &LRU{c: expirable.NewLRU[string, string](maxEntries, nil, ttl)}
}

// Get returns the live entry for key.
func (l *LRU) Get(_ context.Context, key string) (string, bool, error) {
	v, ok := l.c.Get(key)
	return v, ok, nil
}

// Set stores value; ttl is the cache's own (the library has no per-entry
// TTL, and the tracker always passes the configured one).
func (l *LRU) Set(_ context.Context, key, value string, _ time.Duration) error {
	l.c.Add(key, value)
	return nil
}

// Len is the number of entries, for tests.
func (l *LRU) Len() int { return l.c.Len() }

// Olric is the store over a DMap of the embedded node, shared by every
// replica of the cluster.
type Olric struct {
	DM olric.DMap
}

var _ Store = Olric{}

// Get reads key; ErrKeyNotFound is a miss.
func (o Olric) Get(ctx context.Context, key string) (string, bool, error) {
	gr, err := o.DM.Get(ctx, key)
	if errors.Is(err, olric.ErrKeyNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	b, err := gr.Byte()
	if err != nil {
		return "", false, err
	}
	return string(b), true, nil
}

// Set puts key with expiry ttl in the same write, never with a separate
// Expire: Olric v0.7.4's embedded Expire, called on a node that does not
// own the key, replaces the value with an empty one and drops its TTL.
func (o Olric) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	return o.DM.Put(ctx, key, []byte(value), olric.PX(ttl))
}
