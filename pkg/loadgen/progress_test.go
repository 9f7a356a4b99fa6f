package loadgen

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// lines receives every write, so a test can wait for output without
// sleeping.
type lines chan string

func (l lines) Write(b []byte) (int, error) { l <- string(b); return len(b), nil }

func TestProgressLinesAndBar(t *testing.T) {
	for _, tty := range []bool{false, true} {
		clk := clock.NewFake(epoch)
		out := make(lines, 10)
		p := NewProgress(out, tty, "sessions", 4, 10*time.Second, clk)
		p.sent()
		p.sent()
		p.done(&Record{Outcome: OutcomeOK}, true)
		p.done(&Record{Outcome: OutcomeSkipped}, false)
		ctx, cancel := context.WithCancel(context.Background())
		finished := make(chan struct{})
		go func() { p.Run(ctx); close(finished) }()
		clk.WaitForTimers(1)
		step := 10 * time.Second
		if tty {
			step = 200 * time.Millisecond // a terminal redraws five times a second
		}
		clk.Advance(step)
		line := <-out
		if !strings.Contains(line, "sessions 2/4 done (ok 1, failed 0, skipped or aborted 1, in flight 1)") {
			t.Fatalf("tty=%v: line %q", tty, line)
		}
		if tty != strings.HasPrefix(line, "\r") || tty != strings.Contains(line, "[===============               ]") {
			t.Fatalf("tty=%v: line %q", tty, line)
		}
		cancel()
		<-finished
		if last := <-out; !strings.HasSuffix(last, "\n") {
			t.Fatalf("last line %q does not end the line", last)
		}
	}
	var nilProgress *Progress
	nilProgress.sent()
	nilProgress.done(&Record{}, true) // a nil Progress counts nothing and does not panic
}
