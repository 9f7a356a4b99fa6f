package loadgen

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// run, progress printer and timer must stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
