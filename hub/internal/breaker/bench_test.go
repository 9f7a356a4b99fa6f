package breaker

import (
	"strconv"
	"testing"

	"github.com/stargate-router/stargate/pkg/clock"
)

// BenchmarkAttempt is the breaker's cost on one proxied attempt: the
// candidate filter, the permit and its outcome, on a Set of 64 backends.
func BenchmarkAttempt(b *testing.B) {
	s, err := New(DefaultConfig(), clock.Real{})
	if err != nil {
		b.Fatal(err)
	}
	ids := make([]string, 64)
	for i := range ids {
		ids[i] = "pylon-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		i++
		if !s.Available(id) {
			continue
		}
		if p, ok := s.Acquire(id); ok {
			p.Done(Success)
		}
	}
}
