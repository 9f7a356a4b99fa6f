package olricnode

import (
	"errors"
	"time"

	"github.com/olric-data/olric/pkg/storage"
)

// compactingEngine is the storage engine of every DMap fragment: Olric's
// own (kvstore), whose compaction it replaces.
//
// kvstore appends every write to the newest of a fragment's fixed-size
// tables and opens a new table when that one is full, so overwrites and
// deletes leave garbage, and a key rewritten after a table change leaves
// its older version behind in the older table. Its compaction (Olric
// v0.7.4) moves a table's entries into the newest table; run on the
// newest table itself, it copies each entry into that same table and
// deletes the copy, losing the key and the accounting of the original,
// so the table never counts as empty again. From then on every
// compaction pass returns to that table, finds nothing to move and
// reports "not done", and Olric retries it every millisecond forever: the
// node never compacts anything again and its tables grow with every
// write. On the gateway that was the memory growth of the soak, about
// 0.23 MiB a minute at 12 requests a second (every request rewrites a
// rate-limit counter and a last-cluster entry).
//
// This engine compacts by rebuilding instead: a fragment with enough
// garbage gets a fresh store holding, for each key, the version Get
// returns now, minus the entries whose TTL has passed, and the old store
// is dropped whole. Reads see the same values before and after, and the
// fragment's size follows its live entries. Olric calls Compaction with
// the fragment locked, so nothing reads the store during the swap.
type compactingEngine struct {
	storage.Engine
	// now is the clock TTLs are compared with (time.Now in production).
	now func() time.Time
}

// maxGarbageRatio is the share of a fragment's allocated bytes that may
// be garbage before it is rebuilt: Olric's own threshold.
const maxGarbageRatio = 0.4

// Fork returns the engine of a new fragment, wrapped in turn.
func (e *compactingEngine) Fork(c *storage.Config) (storage.Engine, error) {
	child, err := e.Engine.Fork(c)
	if err != nil {
		return nil, err
	}
	return &compactingEngine{Engine: child, now: e.now}, nil
}

// Compaction rebuilds the store when it spans more than one table or its
// garbage reached maxGarbageRatio, in one call (it always reports done).
// On an error the old store stays.
func (e *compactingEngine) Compaction() (bool, error) {
	st := e.Stats()
	if st.NumTables <= 1 && float64(st.Garbage) < float64(st.Allocated)*maxGarbageRatio {
		return true, nil
	}
	fresh, err := e.Engine.Fork(nil)
	if err != nil {
		return true, err
	}
	nowMs := e.now().UnixMilli()
	seen := map[uint64]bool{}
	var copyErr error
	// A key can be listed once per table that holds a version of it;
	// GetRaw returns the version Get serves.
	e.RangeHKey(func(hkey uint64) bool {
		if copyErr != nil || seen[hkey] {
			return copyErr == nil
		}
		seen[hkey] = true
		ttl, err := e.GetTTL(hkey)
		if err == nil && ttl != 0 && nowMs >= ttl {
			return true // expired: Get already answers "not found"
		}
		raw, err := e.GetRaw(hkey)
		if errors.Is(err, storage.ErrKeyNotFound) {
			return true
		}
		if err == nil {
			err = fresh.PutRaw(hkey, raw)
		}
		copyErr = err
		return err == nil
	})
	if copyErr != nil {
		return true, copyErr
	}
	e.Engine = fresh
	return true, nil
}
