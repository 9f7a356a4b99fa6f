package mockengine

import (
	"bytes"
	"errors"
	"strconv"
	"testing"
)

// TestWriteQueuedBatches checks that the lines queued behind the one
// received are written with it (so one flush carries them), in order,
// and that one call stops after a full backlog's worth.
func TestWriteQueuedBatches(t *testing.T) {
	line := func(i int) []byte { return []byte(strconv.Itoa(i) + "\n") }
	sub := make(chan []byte, subscriberBuffer)
	for i := 1; i <= 3; i++ {
		sub <- line(i)
	}
	var w bytes.Buffer
	if !writeQueued(&w, sub, line(0)) {
		t.Fatal("writeQueued failed on a buffer")
	}
	if got := w.String(); got != "0\n1\n2\n3\n" {
		t.Fatalf("wrote %q, want the received line and the three queued behind it", got)
	}
	if len(sub) != 0 {
		t.Fatalf("%d lines left queued", len(sub))
	}

	for i := 1; i <= subscriberBuffer; i++ {
		sub <- line(i)
	}
	w.Reset()
	if !writeQueued(&w, sub, line(0)) {
		t.Fatal("writeQueued failed on a buffer")
	}
	if n := bytes.Count(w.Bytes(), []byte("\n")); n != subscriberBuffer {
		t.Fatalf("wrote %d lines in one call, want the bound %d", n, subscriberBuffer)
	}
	if len(sub) != 1 || string(<-sub) != string(line(subscriberBuffer)) {
		t.Fatal("the line past the bound is not the one left queued")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("closed") }

func TestWriteQueuedWriteError(t *testing.T) {
	sub := make(chan []byte, 2)
	sub <- []byte("1\n")
	if writeQueued(failWriter{}, sub, []byte("0\n")) {
		t.Fatal("writeQueued reported success on a failed write")
	}
}
