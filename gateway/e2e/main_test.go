package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// bin holds the paths of the binaries TestMain built.
var bin struct{ mock, hub, pylon, gateway string }

// TestMain checks for leaked goroutines after every test. One is allowed:
// a cluster client's connection pool retries a failed dial in the
// background once a second and sees its pool closed only after that
// pause, so a client closed at a test's cleanup, after the test killed the
// member it was dialling, can leave one behind for up to a second.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(harness{m}, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

type harness struct{ m *testing.M }

func (h harness) Run() int {
	dir, err := os.MkdirTemp("", "stargate-gw-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	pkgs := []string{"github.com/stargate-router/stargate/gateway/cmd/gateway"}
	pre := os.Getenv("STARGATE_E2E_BIN_DIR")
	if pre == "" {
		pkgs = append(pkgs, "github.com/stargate-router/stargate/pkg/cmd/mock-engine",
			"github.com/stargate-router/stargate/hub/cmd/hub", "github.com/stargate-router/stargate/pylon/cmd/pylon")
		pre = dir
	}
	if err := build(dir, pkgs); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the binaries:", err)
		return 1
	}
	bin.gateway = filepath.Join(dir, "gateway")
	bin.mock = filepath.Join(pre, "mock-engine")
	bin.hub = filepath.Join(pre, "hub")
	bin.pylon = filepath.Join(pre, "pylon")
	return h.m.Run()
}

func build(dir string, pkgs []string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.work above the working directory")
		}
		dir = parent
	}
}
