package mockengine

import (
	"context"
	"errors"
	"sync"
)

// errQueueFull is returned when every running slot is taken and the waiting
// room is full.
var errQueueFull = errors.New("engine queue is full")

// slots is the engine's admission: a fixed number of running slots and a
// bounded FIFO of waiters, like a vLLM scheduler's running and waiting
// queues. Zero capacity means unlimited.
type slots struct {
	mu         sync.Mutex
	capacity   int
	maxWaiting int
	running    int
	waiters    []chan struct{}
}

func newSlots(capacity, maxWaiting int) *slots {
	return &slots{capacity: capacity, maxWaiting: maxWaiting}
}

// acquire takes a running slot, waiting in FIFO order if needed. It fails
// at once with errQueueFull when the waiting room is full, and with ctx's
// error if the caller gives up while waiting (its place is freed).
func (s *slots) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.capacity == 0 || (s.running < s.capacity && len(s.waiters) == 0) {
		s.running++
		s.mu.Unlock()
		return nil
	}
	if len(s.waiters) >= s.maxWaiting {
		s.mu.Unlock()
		return errQueueFull
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()

	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// The slot was handed over just as the caller gave up: pass it on.
		s.releaseLocked()
		return ctx.Err()
	}
}

// release frees a slot, handing it to the oldest waiter if any.
func (s *slots) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *slots) releaseLocked() {
	if len(s.waiters) > 0 {
		ch := s.waiters[0]
		s.waiters = s.waiters[1:]
		close(ch) // the slot moves to the waiter; running is unchanged
		return
	}
	s.running--
}

// counts returns the running and waiting requests.
func (s *slots) counts() (running, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, len(s.waiters)
}
