package prefixindex

import (
	"errors"
	"fmt"
	"time"

	"github.com/stargate-router/stargate/pkg/prefixhash"
)

// Config bounds the index. Every field is required: start from
// DefaultConfig.
type Config struct {
	// MaxNodes is the most checkpoint nodes the index stores, across all
	// models. Each shard holds at most MaxNodes/16 and evicts its least
	// recently marked node to make room, so MaxBytes is a hard bound on the
	// index's memory.
	MaxNodes int
	// MaxHoldersPerNode is the most clusters one checkpoint remembers. Room
	// for this many is reserved with every node (that is what makes the
	// bound hard); a mark that finds the node full replaces the holder
	// marked longest ago.
	MaxHoldersPerNode int
	// TTL is how long a holder is believed after its last mark. An engine
	// evicts cold prefixes on its own, and the hub never hears of it: a
	// holder not re-marked within TTL is treated as gone by Match at once
	// and its memory is freed by the next Sweep.
	TTL time.Duration
}

// The defaults. 1<<20 nodes with room for 8 holders each take at most
// 104 MiB (MaxBytes, docs/design/prefix-index.md#memory): enough to name
// 16384 prompts of 128k tokens at their full 64 checkpoints, or many
// times more sessions, whose turns share their heads. Eight holders leave
// room for a prefix copied to several clusters (a prefix-aware algorithm
// adds a copy only when every holder is saturated), and five minutes
// outlive the think time between two turns of a session while staying
// short of the time a busy engine keeps a cold prefix.
const (
	DefaultMaxNodes          = 1 << 20
	DefaultMaxHoldersPerNode = 8
	DefaultTTL               = 5 * time.Minute
)

// The ranges Validate accepts: every shard must have room for one
// summary's checkpoints, and a node's holder count is a uint8. The
// ceiling on nodes (6.5 GiB at 8 holders) catches a size given in bytes
// where nodes were meant.
const (
	MinNodes        = shardCount * prefixhash.MaxCheckpoints
	MaxNodesLimit   = 1 << 26
	MaxHoldersLimit = 64
)

// DefaultConfig returns the defaults above.
func DefaultConfig() Config {
	return Config{MaxNodes: DefaultMaxNodes, MaxHoldersPerNode: DefaultMaxHoldersPerNode, TTL: DefaultTTL}
}

// Validate reports every invalid field, named as in Config, so the caller
// can map each to its flag.
func (c Config) Validate() error {
	var errs []error
	if c.MaxNodes < MinNodes || c.MaxNodes > MaxNodesLimit {
		errs = append(errs, fmt.Errorf("prefixindex: MaxNodes must be %d to %d, got %d", MinNodes, MaxNodesLimit, c.MaxNodes))
	}
	if c.MaxHoldersPerNode < 1 || c.MaxHoldersPerNode > MaxHoldersLimit {
		errs = append(errs, fmt.Errorf("prefixindex: MaxHoldersPerNode must be 1 to %d, got %d", MaxHoldersLimit, c.MaxHoldersPerNode))
	}
	if c.TTL < time.Millisecond {
		errs = append(errs, fmt.Errorf("prefixindex: TTL must be >= 1ms, got %v", c.TTL))
	}
	return errors.Join(errs...)
}

// Sizes of the stored structures, in bytes: a node's arena entry, one
// holder (room for MaxHoldersPerNode is reserved with every node) and one
// slot of a shard's hash table (which holds up to twice the shard's node
// limit, rounded up to a power of two).
const (
	nodeBytes   = 24
	holderBytes = 8
	slotBytes   = 8
)

// MaxBytes is the hard bound on the index's node storage under c: every
// shard's arena and hash table at their largest. For the default
// Config it is 104 MiB, 104 bytes a node. The cluster slot table (one
// string per cluster that marked and has not been removed) comes on top;
// it is bounded by the clusters the hub knows.
func (c Config) MaxBytes() int64 {
	limit := c.MaxNodes / shardCount
	perShard := int64(limit)*(nodeBytes+int64(c.MaxHoldersPerNode)*holderBytes) + int64(tableSlots(limit))*slotBytes
	return shardCount * perShard
}
