package olricnode

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestShutdownWithinGivesUp: a shutdown that never returns (Olric's server
// waiting for a listener that will never stop) is abandoned at its bound,
// so a failed start exits instead of hanging; one that returns in time
// reports its own result.
func TestShutdownWithinGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		start := time.Now()
		err := shutdownWithin(func(context.Context) error { <-release; return nil }, 5*time.Second)
		if !errors.Is(err, errShutdownHung) {
			t.Fatalf("hung shutdown: err %v, want errShutdownHung", err)
		}
		if waited := time.Since(start); waited != 5*time.Second {
			t.Fatalf("gave up after %v, want exactly the 5s bound", waited)
		}
		close(release)

		// A shutdown still running inside the bound: shutdownWithin
		// waits for it, and returns its result as soon as it ends.
		sentinel := errors.New("closed")
		finish := make(chan struct{})
		done := make(chan error, 1)
		start = time.Now()
		go func() {
			done <- shutdownWithin(func(ctx context.Context) error {
				if _, ok := ctx.Deadline(); !ok {
					return errors.New("no deadline passed to the shutdown")
				}
				<-finish
				return sentinel
			}, 5*time.Second)
		}()
		synctest.Wait() // both goroutines blocked: the shutdown runs, shutdownWithin waits
		select {
		case err := <-done:
			t.Fatalf("shutdownWithin returned %v before the shutdown finished", err)
		default:
		}
		close(finish)
		if err := <-done; !errors.Is(err, sentinel) || time.Since(start) != 0 {
			t.Fatalf("prompt shutdown: err %v after %v, want its own error at once", err, time.Since(start))
		}
	})
}
