package loadgen

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/workload"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func req(i int, at int64, worker int, session string, turn int) workload.Request {
	src := workload.SourcePromptCacheKey
	if session == "" {
		src = workload.SourceNone
	}
	return workload.Request{Index: i, AtMs: at, Worker: worker, Session: session, Turn: turn, Source: src, Endpoint: "chat", NewInputTokens: 4, OutputTokens: 2}
}

// sendEvent is what a fake sender saw.
type sendEvent struct {
	index   int
	offset  time.Duration
	history []Message
	ctx     context.Context
}

// fakeSender reports every send on a channel and answers when release
// delivers a result (or at once when release is nil).
type fakeSender struct {
	clk     clock.Clock
	start   time.Time
	events  chan sendEvent
	release map[int]chan Result
	mu      sync.Mutex
}

func newFakeSender(clk clock.Clock, blocking ...int) *fakeSender {
	f := &fakeSender{clk: clk, start: clk.Now(), events: make(chan sendEvent, 100), release: map[int]chan Result{}}
	for _, i := range blocking {
		f.release[i] = make(chan Result)
	}
	return f
}

func (f *fakeSender) send(ctx context.Context, j *Job) Result {
	f.events <- sendEvent{index: j.Request.Index, offset: f.clk.Since(f.start), history: j.History, ctx: ctx}
	f.mu.Lock()
	ch := f.release[j.Request.Index]
	f.mu.Unlock()
	if ch != nil {
		select {
		case r := <-ch:
			return r
		case <-ctx.Done():
			return Result{Err: context.Cause(ctx).Error()}
		}
	}
	return Result{Status: 200, Reply: "reply-" + j.User[:8], Cluster: "c1"}
}

func runAsync(t *testing.T, r *Runner, w *workload.Workload) chan *Output {
	t.Helper()
	done := make(chan *Output, 1)
	go func() {
		out, err := r.Run(context.Background(), w)
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	return done
}

func TestOpenLoopSendsAtOffsets(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := &workload.Workload{Header: workload.Header{Suite: "t", Mode: workload.ModeOpen}, Requests: []workload.Request{
		req(0, 0, 0, "", 1), req(1, 100, 0, "", 1), req(2, 250, 0, "", 1), req(3, 250, 0, "", 1),
	}}
	f := newFakeSender(clk)
	done := runAsync(t, NewRunner(Config{Clock: clk}, f.send), w)
	if e := <-f.events; e.index != 0 || e.offset != 0 {
		t.Fatalf("first send %+v", e)
	}
	clk.WaitForTimers(1)
	select {
	case e := <-f.events:
		t.Fatalf("request %d sent before its time", e.index)
	default:
	}
	clk.Advance(100 * time.Millisecond)
	if e := <-f.events; e.index != 1 || e.offset != 100*time.Millisecond {
		t.Fatalf("second send %+v", e)
	}
	clk.WaitForTimers(1)
	clk.Advance(150 * time.Millisecond)
	// Requests 2 and 3 share an offset and run concurrently: either
	// may reach the sender first.
	got := map[int]bool{}
	for range 2 {
		e := <-f.events
		if e.offset != 250*time.Millisecond {
			t.Fatalf("send %+v, want 250ms", e)
		}
		got[e.index] = true
	}
	if !got[2] || !got[3] {
		t.Fatalf("sent %v at 250ms, want requests 2 and 3", got)
	}
	out := <-done
	if len(out.Records) != 4 || out.SendWindow != 250*time.Millisecond || out.Records[3].StartMs != 250 {
		t.Fatalf("%d records, window %v", len(out.Records), out.SendWindow)
	}
}

func TestOpenLoopTurnWaitsForPreviousTurnAndResendsHistory(t *testing.T) {
	clk := clock.NewFake(epoch)
	w := &workload.Workload{Header: workload.Header{Suite: "t", Mode: workload.ModeOpen, Seed: 3}, Requests: []workload.Request{
		req(0, 0, 0, "s", 1), req(1, 10, 0, "s", 2),
	}}
	f := newFakeSender(clk, 0)
	done := runAsync(t, NewRunner(Config{Clock: clk, Salt: "r1"}, f.send), w)
	<-f.events
	clk.WaitForTimers(1)
	clk.Advance(50 * time.Millisecond) // turn 2 is due, turn 1 still running
	select {
	case e := <-f.events:
		t.Fatalf("turn 2 (request %d) sent before turn 1 finished", e.index)
	default:
	}
	f.release[0] <- Result{Status: 200, Reply: "first answer"}
	e := <-f.events
	if e.index != 1 || e.offset != 50*time.Millisecond {
		t.Fatalf("turn 2 %+v", e)
	}
	user := workload.UserText(3, "r1:s", 1, 4)
	if len(e.history) != 2 || e.history[0] != (Message{"user", user}) || e.history[1] != (Message{"assistant", "first answer"}) {
		t.Fatalf("history %+v", e.history)
	}
	out := <-done
	if out.Records[1].AtMs != 10 || out.Records[1].StartMs != 50 {
		t.Fatalf("record %+v", out.Records[1])
	}
}

func TestClosedLoopWorkersOwnTheirRequestsInOrder(t *testing.T) {
	w := &workload.Workload{Header: workload.Header{Suite: "t", Mode: workload.ModeClosed, Workers: 2}, Requests: []workload.Request{
		req(0, 0, 0, "a", 1), req(1, 0, 1, "b", 1), req(2, 0, 0, "a", 2), req(3, 0, 1, "", 1), req(4, 0, 0, "c", 1), req(5, 0, 1, "b", 2),
	}}
	var mu sync.Mutex
	order := map[int][]int{}
	hist := map[int]int{}
	send := func(_ context.Context, j *Job) Result {
		mu.Lock()
		order[j.Request.Worker] = append(order[j.Request.Worker], j.Request.Index)
		hist[j.Request.Index] = len(j.History)
		mu.Unlock()
		return Result{Status: 200, Reply: "r"}
	}
	out, err := NewRunner(Config{}, send).Run(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	if got := order[0]; len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 4 {
		t.Fatalf("worker 0 sent %v", got)
	}
	if got := order[1]; len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 5 {
		t.Fatalf("worker 1 sent %v", got)
	}
	if hist[2] != 2 || hist[5] != 2 || hist[4] != 0 {
		t.Fatalf("history lengths %v", hist)
	}
	if len(out.Records) != 6 {
		t.Fatalf("%d records", len(out.Records))
	}
	// A session that changes worker is refused: its turns could deadlock.
	w.Requests[2].Worker = 1
	if _, err := NewRunner(Config{}, send).Run(context.Background(), w); err == nil || !strings.Contains(err.Error(), "moves from worker") {
		t.Fatalf("err = %v", err)
	}
}

func TestFailedTurnSkipsTheRestOfItsSession(t *testing.T) {
	w := &workload.Workload{Header: workload.Header{Suite: "t", Mode: workload.ModeClosed, Workers: 1}, Requests: []workload.Request{
		req(0, 0, 0, "a", 1), req(1, 0, 0, "a", 2), req(2, 0, 0, "b", 1),
	}}
	send := func(_ context.Context, j *Job) Result {
		if j.Request.Index == 0 {
			return Result{Status: 503, Err: "HTTP 503: busy"}
		}
		return Result{Status: 200}
	}
	out, err := NewRunner(Config{}, send).Run(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	if o := []string{out.Records[0].Outcome, out.Records[1].Outcome, out.Records[2].Outcome}; o[0] != OutcomeError || o[1] != OutcomeSkipped || o[2] != OutcomeOK {
		t.Fatalf("outcomes %v", o)
	}
}

func TestMaxRequestsAndDeadline(t *testing.T) {
	w := &workload.Workload{Header: workload.Header{Suite: "t", Mode: workload.ModeClosed, Workers: 2}, Requests: []workload.Request{
		req(0, 0, 0, "", 1), req(1, 0, 1, "", 1), req(2, 0, 0, "", 1), req(3, 0, 1, "", 1),
	}}
	out, err := NewRunner(Config{MaxRequests: 3}, func(context.Context, *Job) Result { return Result{Status: 200} }).Run(context.Background(), w)
	if err != nil || len(out.Records) != 3 {
		t.Fatalf("max 3: %d records, %v", len(out.Records), err)
	}

	// The deadline (on the fake clock) aborts the requests still running
	// and sends no more.
	clk := clock.NewFake(epoch)
	f := newFakeSender(clk, 0, 1)
	done := runAsync(t, NewRunner(Config{Clock: clk, Deadline: time.Minute, Timeout: time.Hour}, f.send), w)
	<-f.events
	<-f.events
	clk.Advance(time.Minute)
	out = <-done
	if len(out.Records) != 2 || out.Records[0].Outcome != OutcomeAborted || !strings.Contains(out.Records[1].Error, "deadline") {
		t.Fatalf("records %+v", out.Records)
	}

	// The per-request timeout fails one request; the run goes on.
	clk = clock.NewFake(epoch)
	f = newFakeSender(clk, 0)
	one := &workload.Workload{Header: w.Header, Requests: w.Requests[:2]}
	done = runAsync(t, NewRunner(Config{Clock: clk, Timeout: time.Second}, f.send), one)
	<-f.events
	<-f.events
	clk.Advance(time.Second)
	out = <-done
	if out.Records[0].Outcome != OutcomeError || out.Records[0].Error != errTimeout.Error() || out.Records[1].Outcome != OutcomeOK {
		t.Fatalf("records %+v", out.Records)
	}
}
