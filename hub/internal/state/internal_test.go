package state

import (
	"math"
	"testing"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

// The store restates three of lb's estimate primitives because it may not
// import lb; this pins the copies to the originals.
func TestHelpersMatchLB(t *testing.T) {
	for _, x := range []float64{-1, 0, 1e-300, 1, 3, 2200.5, math.MaxFloat64, math.Inf(1), math.Inf(-1), math.NaN()} {
		if validTPS(x) != lb.ValidTPS(x) {
			t.Errorf("validTPS(%v) differs", x)
		}
		for _, tok := range []uint64{0, 1, 2, 1000, 1234567, math.MaxUint64} {
			a, aok := queueTimeDeltaMs(tok, x)
			b, bok := lb.QueueTimeDeltaMs(tok, x)
			if a != b || aok != bok {
				t.Errorf("queueTimeDeltaMs(%d, %v) = %d, %v; lb says %d, %v", tok, x, a, aok, b, bok)
			}
		}
	}
	for _, m := range []map[uint32]uint64{nil, {}, {0: 5}, {2: 20, 4: 40}, {0: 1, 1: 2, 7: 3, math.MaxUint32: 4}} {
		for _, p := range []uint32{0, 1, 2, 3, 4, 6, 7, 100, math.MaxUint32} {
			want, _ := lb.PriorityMapEstimate(m, p)
			if got := priorityEstimate(m, p); got != want {
				t.Errorf("priorityEstimate(%v, %d) = %d, lb says %d", m, p, got, want)
			}
		}
	}
}

func TestSatAdd(t *testing.T) {
	for _, tc := range [][3]uint64{{1, 2, 3}, {math.MaxUint64, 1, math.MaxUint64}, {math.MaxUint64 - 1, 1, math.MaxUint64}, {1 << 63, 1 << 63, math.MaxUint64}} {
		if got := satAdd(tc[0], tc[1]); got != tc[2] {
			t.Errorf("satAdd(%d, %d) = %d", tc[0], tc[1], got)
		}
	}
}
