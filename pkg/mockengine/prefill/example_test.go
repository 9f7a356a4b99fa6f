package prefill_test

import (
	"context"
	"fmt"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/mockengine/prefill"
)

// Two prefills of one second of solo work each, started together, share the
// GPU and both finish after two seconds.
func Example() {
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	s := prefill.New(clk)
	start := clk.Now()

	took := make(chan time.Duration, 2)
	for range 2 {
		go func() {
			if err := s.Do(context.Background(), time.Second); err == nil {
				took <- clk.Since(start)
			}
		}()
	}
	// Every join re-arms the scheduler's timer, which closes Changed, so
	// this waits for both jobs without sleeping.
	for {
		changed := clk.Changed()
		if s.Active() == 2 {
			break
		}
		<-changed
	}
	clk.Advance(2 * time.Second)
	fmt.Println(<-took, <-took)
	// Output: 2s 2s
}
