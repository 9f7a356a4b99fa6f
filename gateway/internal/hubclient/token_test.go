package hubclient

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// TestTokenFileFollowsRotation: a token file is read again as soon as
// its size or modification time changes, or it is replaced by another
// file (a Secret's symlink swap); a rewrite that keeps both shows within
// tokenMaxAge; a file that disappears fails the request.
func TestTokenFileFollowsRotation(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tok")
	stamp := time.Unix(1_700_000_000, 0)
	write := func(tok string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	clk := clock.NewFake(stamp)
	tf := &tokenFile{path: path, clk: clk}
	want := func(v string) {
		t.Helper()
		got, err := tf.bearer()
		if err != nil || got != "Bearer "+v {
			t.Fatalf("bearer %q, %v; want %q", got, err, v)
		}
	}
	write("aaa\n", stamp)
	want("aaa")
	write("bbb\n", stamp) // same size, same time: not seen yet
	want("aaa")
	clk.Advance(tokenMaxAge)
	want("bbb")
	write("ccc\n", stamp.Add(time.Millisecond)) // a new modification time
	want("ccc")
	write("dddd", stamp.Add(time.Millisecond)) // same size as "ccc\n", same time
	other := filepath.Join(dir, "tok2")
	if err := os.WriteFile(other, []byte("eee\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(other, stamp.Add(time.Millisecond), stamp.Add(time.Millisecond))
	if err := os.Rename(other, path); err != nil { // another file now
		t.Fatal(err)
	}
	want("eee")
	_ = os.Remove(path)
	if _, err := tf.bearer(); err == nil {
		t.Fatal("a missing token file gave a token")
	}
}
