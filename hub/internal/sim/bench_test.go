package sim

import "testing"

// BenchmarkCompareSessions is a sessions-suite-sized replay (16 workers,
// 1024 six-turn sessions = 6144 requests) through the five default arms on
// the default fleet, one arm at a time: the "seconds per run" budget.
func BenchmarkCompareSessions(b *testing.B) {
	f := DefaultFleet()
	p := prepare(b, closedSessions(b, 16, 1024, 6, 1500, 150, 48), f)
	arms, err := ParseArms("power-of-n,wait-and-widen,wait-and-widen+lca,pulsar-wait-and-widen+lca,oracle")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := Compare(p, f, arms, Options{Seed: 1}, 1); err != nil {
			b.Fatal(err)
		}
	}
}
