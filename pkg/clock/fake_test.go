package clock

import (
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestFakeTimersFireInDeadlineOrder(t *testing.T) {
	f := NewFake(epoch)
	late := f.NewTimer(2 * time.Second)
	early := f.NewTimer(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-early.C():
		t.Fatal("timer fired before its deadline")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-early.C(); !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("early fired at %v, want %v", got, epoch.Add(time.Second))
	}
	select {
	case <-late.C():
		t.Fatal("late timer fired early")
	default:
	}
	f.Advance(time.Hour)
	if got := <-late.C(); !got.Equal(epoch.Add(2 * time.Second)) {
		t.Fatalf("late fired at %v, want its own deadline", got)
	}
	if got := f.Now(); !got.Equal(epoch.Add(time.Hour + time.Second)) {
		t.Fatalf("Now = %v after advances, want %v", got, epoch.Add(time.Hour+time.Second))
	}
}

func TestFakeStopAndReset(t *testing.T) {
	f := NewFake(epoch)
	tm := f.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	if tm.Stop() {
		t.Fatal("second Stop reported true")
	}
	f.Advance(2 * time.Second)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	if tm.Reset(time.Second) {
		t.Fatal("Reset of a stopped timer reported it active")
	}
	if f.Timers() != 1 {
		t.Fatalf("Timers() = %d, want 1", f.Timers())
	}
	f.Advance(time.Second)
	<-tm.C()
}

func TestFakeAfterFuncRunsCallback(t *testing.T) {
	f := NewFake(epoch)
	done := make(chan time.Time, 1)
	f.AfterFunc(time.Minute, func() { done <- f.Now() })
	f.WaitForTimers(1)
	f.Advance(time.Minute)
	if got := <-done; !got.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("callback saw %v, want %v", got, epoch.Add(time.Minute))
	}
}

func TestSleep(t *testing.T) {
	f := NewFake(epoch)
	res := make(chan bool, 1)
	go func() { res <- Sleep(f, nil, time.Second) }()
	f.WaitForTimers(1)
	f.Advance(time.Second)
	if !<-res {
		t.Fatal("Sleep reported cancelled")
	}
	done := make(chan struct{})
	go func() { res <- Sleep(f, done, time.Second) }()
	f.WaitForTimers(1)
	close(done)
	if <-res {
		t.Fatal("Sleep ignored done")
	}
	if Sleep(Real{}, nil, 0) != true {
		t.Fatal("zero sleep reported cancelled")
	}
}
