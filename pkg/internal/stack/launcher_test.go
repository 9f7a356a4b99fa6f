package stack

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childEnv makes the test binary act as a child process. A port number
// makes it serve 200 on that port until SIGTERM; "fail" makes it exit at
// once; "fleet" makes it play the binary it was started as (fakeFleet).
const childEnv = "STACK_TEST_CHILD"

// TestMain runs a child when asked to and otherwise the tests, failing the
// package if one leaves a goroutine behind.
func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(child(v))
	}
	goleak.VerifyTestMain(m)
}

func child(v string) int {
	switch {
	case v == "fail":
		fmt.Fprintln(os.Stderr, "child: refusing to start")
		return 2
	case strings.HasPrefix(v, "fleet"):
		return fakeFleet(v)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	srv := &http.Server{Addr: "127.0.0.1:" + v, Handler: ok, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.ListenAndServe() }()
	<-sig
	return 0
}

// self is the test binary as a service.
func self(name, mode string) service {
	return service{name: name, binary: filepath.Base(os.Args[0]), ports: 2,
		args: func([]int) []string { return []string{"-test.run=^$"} },
		env: func(p []int) []string {
			if mode == "fail" {
				return []string{childEnv + "=fail"}
			}
			return []string{fmt.Sprintf("%s=%d", childEnv, p[0])}
		},
		ready: func(p []int) string { return "http://" + addr(p[0]) + "/" }}
}

func testLauncher(t *testing.T) *launcher {
	t.Helper()
	return newLauncher(filepath.Dir(os.Args[0]), t.TempDir(), &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()})
}

func TestLauncherStartsAndStopsEveryChild(t *testing.T) {
	l := testLauncher(t)
	ports, err := l.startAll(t.Context(), self("one", ""), self("two", ""))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, ps := range ports {
		for _, p := range ps {
			if seen[p] {
				t.Errorf("port %d handed out twice: %v", p, ports)
			}
			seen[p] = true
		}
	}
	procs := l.procs
	if len(procs) != 2 {
		t.Fatalf("%d children, want 2", len(procs))
	}
	l.stop()
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			t.Errorf("%s still running after stop", p.name)
		}
	}
	if len(l.procs) != 0 {
		t.Errorf("stop left %d children listed", len(l.procs))
	}
}

func TestLauncherReportsAChildThatFails(t *testing.T) {
	l := testLauncher(t)
	defer l.stop()
	_, err := l.startAll(t.Context(), self("ok", ""), self("bad", "fail"))
	if err == nil || !strings.Contains(err.Error(), "bad: exited before it was ready") || !strings.Contains(err.Error(), "child: refusing to start") {
		t.Fatalf("error %v, want the failing child named with its log", err)
	}
	// It was tried three times, each with fresh ports.
	if n := strings.Count(err.Error(), "child: refusing to start"); n != 3 {
		t.Errorf("%d attempts in the log, want 3", n)
	}
}
