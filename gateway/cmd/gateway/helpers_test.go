package main

import (
	"bytes"
	"regexp"
	"sync"
	"testing"
	"time"
)

// syncBuf is a log sink the gateway writes from its goroutines while a
// test reads it; it signals every write, so a test can wait for a log
// line (the gateway's readiness signal) without polling.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
	// changed is closed and replaced on every write.
	changed chan struct{}
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.b.Write(p)
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
	return n, err
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor returns the first match of re in the log, waiting for the
// writes that bring it. It fails the test if the process ends first
// (done delivers its exit code) or nothing matches within 10 s: that bound
// only turns a hang into a failure, it orders nothing.
func (s *syncBuf) waitFor(t *testing.T, re *regexp.Regexp, done <-chan int) []string {
	t.Helper()
	guard := time.NewTimer(10 * time.Second)
	defer guard.Stop()
	for {
		s.mu.Lock()
		m := re.FindStringSubmatch(s.b.String())
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		changed := s.changed
		s.mu.Unlock()
		if m != nil {
			return m
		}
		select {
		case <-changed:
		case code := <-done:
			t.Fatalf("exited %d before logging %s: %s", code, re, s.String())
		case <-guard.C:
			t.Fatalf("no log line matches %s: %s", re, s.String())
		}
	}
}
