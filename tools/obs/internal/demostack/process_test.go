package demostack

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeDemo writes bin/demo as a shell script: it runs pre, prints a
// DEMO_KEEP block (with a credential), then runs body.
func fakeDemo(t *testing.T, pre, body string) string {
	t.Helper()
	bin := t.TempDir()
	script := "#!/bin/sh\n" + pre + `
echo "  hub routes demo-model with pulsar-wait-and-widen (cache_affinity_wait_ms 20, last_cluster_affinity on)"
echo "  region near (hub RTT ~1 ms, engine TTFT +10 ms):  near-a 64k/133k tok/s"
echo "workload done"
echo "DEMO_KEEP: the stack stays up until Ctrl-C"
echo "  gateway        http://127.0.0.1:1/v1  (API key sk-secret, in /tmp/k)"
echo "  hub            http://127.0.0.1:4  (gateway token gw-secret; routing state http://127.0.0.1:3/debug/state)"
echo "  metrics        gateway http://127.0.0.1:2/metrics  hub http://127.0.0.1:3/metrics"
echo "                 pylon near-a http://127.0.0.1:5/metrics"
echo "  try            curl -sN http://127.0.0.1:1/v1/chat/completions -H 'Authorization: Bearer sk-secret' \\"
` + body
	if err := os.WriteFile(filepath.Join(bin, "demo"), []byte(script), 0o700); err != nil { //nolint:gosec // G306: a test's executable
		t.Fatal(err)
	}
	return bin
}

// syncBuffer is a bytes.Buffer safe for the output goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestStartStop(t *testing.T) {
	// The demo stops its children on SIGINT and exits 0; like the real
	// one, it handles the signal before it prints its URLs.
	bin := fakeDemo(t, `sleep 600 &
trap 'kill $!; echo stopping; exit 0' INT`, "wait\n")
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, ep, err := Start(ctx, Options{BinDir: bin, ResultsDir: t.TempDir(), Args: []string{"--sessions", "1"}, Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	if ep.HubAdmin != "http://127.0.0.1:3" || ep.APIKey != "sk-secret" || ep.GatewayToken != "gw-secret" {
		t.Errorf("endpoints %+v: want HubAdmin http://127.0.0.1:3 and the credentials as printed", ep)
	}
	pid := st.cmd.Process.Pid
	if err := st.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !gone(pid) {
		t.Errorf("the demo (pid %d) still runs after Stop", pid)
	}
	if err := st.Stop(); err != nil {
		t.Errorf("a second Stop: %v", err)
	}
	got := out.String()
	if !strings.Contains(got, "stopping") || !strings.Contains(got, "API key <redacted>") || strings.Contains(got, "sk-secret") || strings.Contains(got, "gw-secret") {
		t.Errorf("the copied output should hold the demo's last line and no credential:\n%s", got)
	}
}

// childPID reads the pid a fake demo printed as "child <pid>".
func childPID(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`child (\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the fake demo printed no child pid: %q", out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

func TestStopDuringTheWorkload(t *testing.T) {
	// Interrupted before its workload ends, the demo exits 130: the
	// answer to Stop's own signal, not a failure.
	// Its child, left behind in its process group, goes too.
	bin := fakeDemo(t, `trap 'exit 130' INT
sleep 600 &
echo "child $!"`, "wait\n")
	var out syncBuffer
	st, _, err := Start(t.Context(), Options{BinDir: bin, ResultsDir: t.TempDir(), Output: &out})
	if err != nil {
		t.Fatal(err)
	}
	child := childPID(t, out.String())
	if err := st.Stop(); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if left := waitGone([]int{child}, killWait); len(left) > 0 {
		t.Errorf("the demo's child %d still runs after Stop", child)
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	// Any other failure is reported.
	bin = fakeDemo(t, `trap 'echo broken; exit 3' INT`, "sleep 600 & wait\n")
	st, _, err = Start(t.Context(), Options{BinDir: bin, ResultsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Stop(); err == nil || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "broken") {
		t.Errorf("Stop: %v, want the exit status and the output", err)
	}
}

func TestStopKillsAStubbornDemo(t *testing.T) {
	// The demo ignores SIGINT, and its child runs in a session (and
	// process group) of its own, as the stack's children do.
	bin := fakeDemo(t, `trap '' INT
setsid sleep 600 &
echo "child $!"`, "wait\n")
	var out syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, _, err := Start(ctx, Options{BinDir: bin, ResultsDir: t.TempDir(), Output: &out, StopGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The child's pid came before the block Start waited for.
	child := childPID(t, out.String())
	err = st.Stop()
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop: %v, want an error saying the demo was killed", err)
	}
	for _, pid := range []int{st.cmd.Process.Pid, child} {
		if !gone(pid) {
			t.Errorf("pid %d still runs after Stop", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func TestStartDemoExits(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'demo: stack: hub: exited before it was ready'\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bin, "demo"), []byte(script), 0o700); err != nil { //nolint:gosec // G306: a test's executable
		t.Fatal(err)
	}
	_, _, err := Start(context.Background(), Options{BinDir: bin, ResultsDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("got %v, want the exit status and the demo's last output", err)
	}
}

func TestStartTimesOut(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho 'still starting'\nsleep 600 &\ntrap 'kill $!; exit 0' INT\nwait\n"
	if err := os.WriteFile(filepath.Join(bin, "demo"), []byte(script), 0o700); err != nil { //nolint:gosec // G306: a test's executable
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _, err := Start(ctx, Options{BinDir: bin, ResultsDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "found none before context deadline exceeded") || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("got %v, want a timeout naming the demo's last output", err)
	}
}
