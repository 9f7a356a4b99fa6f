package main

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
)

// childEnv makes the test binary act as a child process: it serves 200 on
// the port it names and exits on SIGTERM; "fail" makes it exit at once.
const childEnv = "DEMO_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		os.Exit(child(v))
	}
	os.Exit(m.Run())
}

func child(v string) int {
	if v == "fail" {
		fmt.Fprintln(os.Stderr, "child: refusing to start")
		return 2
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

func TestStackStartsAndStopsEveryChild(t *testing.T) {
	st := newStack(filepath.Dir(os.Args[0]), t.TempDir())
	ports, err := st.startAll(t.Context(), self("one", ""), self("two", ""))
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
	procs := st.procs
	if len(procs) != 2 {
		t.Fatalf("%d children, want 2", len(procs))
	}
	st.stop()
	for _, p := range procs {
		select {
		case <-p.exited:
		default:
			t.Errorf("%s still running after stop", p.name)
		}
	}
	if len(st.procs) != 0 {
		t.Errorf("stop left %d children listed", len(st.procs))
	}
}

func TestStackReportsAChildThatFails(t *testing.T) {
	st := newStack(filepath.Dir(os.Args[0]), t.TempDir())
	defer st.stop()
	_, err := st.startAll(t.Context(), self("ok", ""), self("bad", "fail"))
	if err == nil || !strings.Contains(err.Error(), "bad: exited before it was ready") || !strings.Contains(err.Error(), "child: refusing to start") {
		t.Fatalf("error %v, want the failing child named with its log", err)
	}
	// It was tried three times, each with fresh ports.
	if n := strings.Count(err.Error(), "child: refusing to start"); n != 3 {
		t.Errorf("%d attempts in the log, want 3", n)
	}
}
