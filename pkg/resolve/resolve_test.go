package resolve

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// fakeResolver answers from a table, or blocks until its context ends
// when block is set.
type fakeResolver struct {
	hosts   map[string][]string
	block   bool
	lookups int
}

func (f *fakeResolver) LookupHost(ctx context.Context, host string) ([]string, error) {
	f.lookups++
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return f.hosts[host], nil
}

func TestLookup(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	r := &fakeResolver{hosts: map[string][]string{"hub": {"10.0.0.1", "10.0.0.2"}, "gone": {}}}
	ips, err := Lookup(t.Context(), clk, r, "hub", time.Second)
	if err != nil || !slices.Equal(ips, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("hub: %v %v", ips, err)
	}
	if ips, err := Lookup(t.Context(), clk, r, "192.0.2.7", time.Second); err != nil || !slices.Equal(ips, []string{"192.0.2.7"}) || r.lookups != 1 {
		t.Fatalf("an IP literal: %v %v after %d lookups, want itself without a lookup", ips, err, r.lookups)
	}
	if _, err := Lookup(t.Context(), clk, r, "gone", 0); err == nil {
		t.Fatal("a name without addresses: no error")
	}
}

// The timeout runs on the given clock: in a synctest bubble the wall
// clock is virtual, so a lookup that would block forever ends at exactly
// its timeout without the test waiting.
func TestLookupTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &fakeResolver{block: true}
		start := time.Now()
		_, err := Lookup(context.Background(), clock.Real{}, r, "slow", 2*time.Second)
		if !errors.Is(err, context.Canceled) || time.Since(start) != 2*time.Second {
			t.Fatalf("err %v after %v, want the lookup cancelled at its 2 s timeout", err, time.Since(start))
		}
	})
}
