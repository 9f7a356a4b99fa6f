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
var bin struct{ mock, hub, pylon string }

// The packages TestMain builds, in the go.work workspace.
var buildPackages = []string{
	"github.com/stargate-router/stargate/pkg/cmd/mock-engine",
	"github.com/stargate-router/stargate/hub/cmd/hub",
	"github.com/stargate-router/stargate/pylon/cmd/pylon",
}

func TestMain(m *testing.M) {
	// Every child process is waited for and every client transport closes
	// its idle connections in a t.Cleanup, so the test process itself must
	// end with no goroutine of its own left.
	goleak.VerifyTestMain(harness{m})
}

// harness builds the binaries around m.Run and removes them afterwards.
type harness struct{ m *testing.M }

func (h harness) Run() int {
	dir, err := os.MkdirTemp("", "stargate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the binaries:", err)
		return 1
	}
	bin.mock = filepath.Join(dir, "mock-engine")
	bin.hub = filepath.Join(dir, "hub")
	bin.pylon = filepath.Join(dir, "pylon")
	return h.m.Run()
}

// build compiles the mock engine, hub and pylon into dir with the
// workspace of the repository this package lives in.
func build(dir string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	args := append([]string{"build", "-o", dir + string(filepath.Separator)}, buildPackages...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(root, "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}

// repoRoot walks up from the working directory to the one holding go.work.
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
