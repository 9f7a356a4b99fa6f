package loadgen

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// Progress counts requests as a run goes and prints them: a redrawn bar on
// a terminal, a plain line every interval otherwise (CI logs). A nil
// *Progress counts nothing.
type Progress struct {
	out      io.Writer
	tty      bool
	total    int
	label    string
	interval time.Duration
	clock    clock.Clock

	inflight, doneN, ok, failed, notSent atomic.Int64
}

// NewProgress returns a progress reporter for total requests. tty selects
// the redrawn bar; interval is how often a line is printed (the bar
// redraws five times a second).
func NewProgress(out io.Writer, tty bool, label string, total int, interval time.Duration, clk clock.Clock) *Progress {
	if tty {
		interval = 200 * time.Millisecond
	}
	return &Progress{out: out, tty: tty, total: total, label: label, interval: interval, clock: clk}
}

func (p *Progress) sent() {
	if p != nil {
		p.inflight.Add(1)
	}
}

// done counts a finished request; wasSent says whether sent counted it.
func (p *Progress) done(r *Record, wasSent bool) {
	if p == nil {
		return
	}
	if wasSent {
		p.inflight.Add(-1)
	}
	p.doneN.Add(1)
	switch r.Outcome {
	case OutcomeOK:
		p.ok.Add(1)
	case OutcomeError:
		p.failed.Add(1)
	default:
		p.notSent.Add(1)
	}
}

// Run prints until ctx is done, then prints a last line.
func (p *Progress) Run(ctx context.Context) {
	start := p.clock.Now()
	for clock.Sleep(p.clock, ctx.Done(), p.interval) {
		p.print(start, false)
	}
	p.print(start, true)
}

// Line is the current progress as text.
func (p *Progress) Line(elapsed time.Duration) string {
	done, total := p.doneN.Load(), max(int64(p.total), 1)
	return fmt.Sprintf("%s %d/%d done (ok %d, failed %d, skipped or aborted %d, in flight %d) %s", p.label, done, p.total,
		p.ok.Load(), p.failed.Load(), p.notSent.Load(), p.inflight.Load(), elapsed.Round(time.Second)) + bar(done, total, p.tty)
}

func bar(done, total int64, tty bool) string {
	if !tty {
		return ""
	}
	const width = 30
	n := int(min(done*width/total, width))
	return " [" + strings.Repeat("=", n) + strings.Repeat(" ", width-n) + "]"
}

func (p *Progress) print(start time.Time, last bool) {
	line := p.Line(p.clock.Since(start))
	switch {
	case p.tty && last:
		fmt.Fprintf(p.out, "\r\033[K%s\n", line)
	case p.tty:
		fmt.Fprintf(p.out, "\r\033[K%s", line)
	default:
		fmt.Fprintln(p.out, line)
	}
}

// IsTerminal reports whether w is a terminal, the tty argument of
// NewProgress: a redrawn bar there, plain lines in logs and pipes.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
