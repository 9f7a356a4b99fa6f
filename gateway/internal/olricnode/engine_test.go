package olricnode

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/olric-data/olric/config"
	"github.com/olric-data/olric/pkg/storage"
)

// fragmentEngine returns the engine of one fragment, as Olric forks it,
// with 4 KiB tables and the clock at *now.
func fragmentEngine(t *testing.T, now *time.Time) storage.Engine {
	t.Helper()
	root := config.NewEngine()
	root.Config["tableSize"] = uint64(4 << 10)
	if err := root.Sanitize(); err != nil {
		t.Fatal(err)
	}
	e := &compactingEngine{Engine: root.Implementation, now: func() time.Time { return *now }}
	f, err := e.Fork(nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func put(t *testing.T, e storage.Engine, hkey uint64, value string, ttl time.Time) {
	t.Helper()
	en := e.NewEntry()
	en.SetKey(fmt.Sprintf("key-%d", hkey))
	en.SetValue([]byte(value))
	if !ttl.IsZero() {
		en.SetTTL(ttl.UnixMilli())
	}
	if err := e.Put(hkey, en); err != nil {
		t.Fatal(err)
	}
}

// TestCompactingEngineRebuilds: one compaction call shrinks a fragment
// spread over many tables to one, keeps each live key at the value Get
// served before, and drops the keys whose TTL passed by the engine's
// clock.
func TestCompactingEngineRebuilds(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	e := fragmentEngine(t, &now)
	for round := range 50 {
		for k := range uint64(10) {
			ttl := now.Add(time.Hour)
			if k%2 == 1 {
				ttl = now.Add(time.Minute)
			}
			put(t, e, k, fmt.Sprintf("v%d", round), ttl)
		}
	}
	put(t, e, 100, "forever", time.Time{})
	if st := e.Stats(); st.NumTables < 3 {
		t.Fatalf("%d tables before compaction, want several: the test no longer spans tables", st.NumTables)
	}
	now = now.Add(2 * time.Minute)
	done, err := e.Compaction()
	if !done || err != nil {
		t.Fatalf("compaction = %v, %v; want done in one call", done, err)
	}
	if st := e.Stats(); st.NumTables != 1 || st.Length != 6 || st.Garbage != 0 {
		t.Fatalf("after compaction: %+v, want 1 table holding 6 entries and no garbage", st)
	}
	for k := range uint64(10) {
		got, err := e.Get(k)
		switch {
		case k%2 == 1 && !errors.Is(err, storage.ErrKeyNotFound):
			t.Errorf("key %d expired but is still stored (%v)", k, err)
		case k%2 == 0 && (err != nil || string(got.Value()) != "v49"):
			t.Errorf("key %d: %v %v, want v49", k, got, err)
		}
	}
	if got, err := e.Get(100); err != nil || string(got.Value()) != "forever" {
		t.Errorf("key without TTL: %v %v", got, err)
	}
	// Nothing left to compact: the next call changes nothing.
	inner := e.(*compactingEngine).Engine
	if done, err := e.Compaction(); !done || err != nil || e.(*compactingEngine).Engine != inner {
		t.Fatalf("second compaction: %v %v, and it rebuilt the store again", done, err)
	}
}
