package hubclient

import (
	"os"
	"sync"
	"time"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/clock"
)

// tokenMaxAge bounds how long a token read from the file is used without
// reading the file again, even when the file looks unchanged: a rewrite
// that keeps the size within the file system's timestamp granularity
// cannot hide a rotation for longer.
const tokenMaxAge = time.Second

// tokenFile is the gateway's hub token, read from its file again as soon
// as the file changes, so a rotated token applies to the next request.
// Reading the file for every request cost an open, two reads and a close
// each; a stat tells the same: a Kubernetes Secret is rotated by swapping
// a symlink (another file), a rewrite changes the size or the
// modification time.
type tokenFile struct {
	path string
	clk  clock.Clock

	mu   sync.Mutex
	info os.FileInfo
	read time.Time
	// value is "Bearer <token>", the Authorization value.
	value string
}

// bearer returns the Authorization value for the token in the file now.
func (t *tokenFile) bearer() (string, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", err
	}
	now := t.clk.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.info != nil && os.SameFile(fi, t.info) && fi.Size() == t.info.Size() && fi.ModTime().Equal(t.info.ModTime()) &&
		now.Sub(t.read) < tokenMaxAge {
		return t.value, nil
	}
	tok, err := cli.ReadSecretFile(t.path)
	if err != nil {
		return "", err
	}
	t.info, t.read, t.value = fi, now, "Bearer "+tok
	return t.value, nil
}
