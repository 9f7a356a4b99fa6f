package stack

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestFloorHopsChainToTheEngine starts two relay-floor hops (fake
// binaries): floor-1 calls the first engine, floor-2 calls floor-1, a chat
// through the outer one reaches the engine, and every child's PID is a
// live process until Stop.
func TestFloorHopsChainToTheEngine(t *testing.T) {
	t.Setenv(childEnv, "fleet")
	bin := fakeBin(t)
	exe, _ := os.Executable()
	if err := os.Symlink(exe, filepath.Join(bin, floorBinary)); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	st, err := Start(t.Context(), Options{BinDir: bin, LogDir: logs, Fleet: LegacyBenchFleet(), FloorHops: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	ep := st.Endpoints()
	if len(ep.FloorHops) != 2 {
		t.Fatalf("floor hops %v, want 2", ep.FloorHops)
	}
	first := ep.Engines[LegacyBenchFleet().EngineIDs()[0]]
	for i, want := range []string{first, ep.FloorHops[0]} {
		args := st.l.latest(floorName(i)).cmd.Args
		if got, _ := flagValue(args, "target"); got != want {
			t.Errorf("%s --target %q, want %q", floorName(i), got, want)
		}
	}
	chat(t, ep.FloorHops[1], strings.Repeat("through two hops. ", 10))

	var pids []int
	for _, name := range []string{"floor-1", "floor-2", "hub", "gateway"} {
		pid, err := st.PID(name)
		if err != nil || syscall.Kill(pid, 0) != nil {
			t.Fatalf("PID(%s) = %d, %v: not a live process", name, pid, err)
		}
		if slices.Contains(pids, pid) {
			t.Errorf("PID(%s) = %d, shared with another child", name, pid)
		}
		pids = append(pids, pid)
	}
	if _, err := st.PID("floor-3"); err == nil {
		t.Error("PID of a child that was never started succeeded")
	}
	st.Stop()
	if _, err := st.PID("floor-1"); err == nil {
		t.Error("PID of a stopped child succeeded")
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Stop (%v)", pid, err)
		}
	}
	assertAllGone(t, logs)
}

// Without baseline-proxy in the bin folder a stack with floor hops does
// not start, and says which binary is missing; without floor hops it is
// not needed.
func TestFloorHopsNeedTheirBinary(t *testing.T) {
	t.Setenv(childEnv, "fleet")
	bin := fakeBin(t)
	_, err := Start(t.Context(), Options{BinDir: bin, LogDir: t.TempDir(), Fleet: LegacyBenchFleet(), FloorHops: 1})
	if err == nil || !strings.Contains(err.Error(), floorBinary) {
		t.Fatalf("Start without %s: %v", floorBinary, err)
	}
	st, err := Start(t.Context(), Options{BinDir: bin, LogDir: t.TempDir(), Fleet: LegacyBenchFleet()})
	if err != nil {
		t.Fatal(err)
	}
	st.Stop()
}
