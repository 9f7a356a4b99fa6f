package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnvThenFlags(t *testing.T) {
	var out bytes.Buffer
	fs := New("x", "", &out)
	var listen string
	var n int
	var d time.Duration
	var on bool
	fs.String(&listen, "listen", "X_LISTEN", "127.0.0.1:1", "address")
	fs.Int(&n, "n", "X_N", 3, "count")
	fs.Duration(&d, "wait", "X_WAIT", time.Second, "wait")
	fs.Bool(&on, "on", "X_ON", false, "switch")
	err := fs.Parse([]string{"--n", "7"}, env(map[string]string{"X_LISTEN": "127.0.0.1:9", "X_N": "5", "X_ON": "true"}))
	if err != nil {
		t.Fatal(err)
	}
	if listen != "127.0.0.1:9" || n != 7 || d != time.Second || !on {
		t.Fatalf("got listen=%q n=%d wait=%v on=%v", listen, n, d, on)
	}
	if !fs.Set("listen") || !fs.Set("n") || fs.Set("wait") {
		t.Fatal("Set does not reflect what was given")
	}
}

func TestBadEnvNamesVariableAndFlag(t *testing.T) {
	fs := New("x", "", &bytes.Buffer{})
	var n int
	fs.Int(&n, "max", "X_MAX", 1, "max")
	err := fs.Parse(nil, env(map[string]string{"X_MAX": "many"}))
	if err == nil || !strings.Contains(err.Error(), "X_MAX") || !strings.Contains(err.Error(), "--max") {
		t.Fatalf("err = %v, want it to name X_MAX and --max", err)
	}
}

func TestUnknownFlagAndStrayArgument(t *testing.T) {
	fs := New("x", "", &bytes.Buffer{})
	if err := fs.Parse([]string{"--nope"}, env(nil)); err == nil {
		t.Fatal("unknown flag accepted")
	}
	fs = New("x", "", &bytes.Buffer{})
	if err := fs.Parse([]string{"stray"}, env(nil)); err == nil || !strings.Contains(err.Error(), "stray") {
		t.Fatalf("stray argument: err = %v", err)
	}
}

func TestHelpListsFlagEnvDefault(t *testing.T) {
	var out bytes.Buffer
	fs := New("mock", "Summary line.", &out)
	var s string
	var f float64
	fs.String(&s, "model-name", "MOCK_MODEL_NAME", "dummy-model", "model to serve")
	fs.Float64(&f, "chars-per-token", "MOCK_CHARS_PER_TOKEN", 4, "estimate")
	fs.Alias("http-listen-addr", "model-name")
	err := fs.Parse([]string{"--help"}, env(nil))
	if !IsHelp(err) {
		t.Fatalf("err = %v, want help", err)
	}
	for _, want := range []string{"Summary line.", "--model-name", "MOCK_MODEL_NAME", "dummy-model", "--chars-per-token", "MOCK_CHARS_PER_TOKEN", "alias --http-listen-addr"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

func TestAliasSetsSameValue(t *testing.T) {
	fs := New("x", "", &bytes.Buffer{})
	var s string
	fs.String(&s, "listen", "X_LISTEN", "a", "address")
	fs.Alias("http-listen-addr", "listen")
	if err := fs.Parse([]string{"--http-listen-addr", "b"}, env(nil)); err != nil {
		t.Fatal(err)
	}
	if s != "b" || !fs.Set("http-listen-addr") {
		t.Fatalf("alias did not set the value: %q", s)
	}
}

func TestMillis(t *testing.T) {
	fs := New("x", "", &bytes.Buffer{})
	var d time.Duration
	fs.Millis(&d, "token-delay-ms", "X_TOKEN_DELAY_MS", 100*time.Millisecond, "delay")
	if d != 100*time.Millisecond {
		t.Fatalf("default = %v", d)
	}
	if err := fs.Parse([]string{"--token-delay-ms", "2.5"}, env(nil)); err != nil {
		t.Fatal(err)
	}
	if d != 2500*time.Microsecond {
		t.Fatalf("got %v, want 2.5ms", d)
	}
	fs = New("x", "", &bytes.Buffer{})
	fs.Millis(&d, "ttft-ms", "", 0, "ttft")
	if err := fs.Parse([]string{"--ttft-ms", "10s"}, env(nil)); err == nil {
		t.Fatal("a Go duration was accepted where milliseconds are expected")
	}
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/tok"
	if err := os.WriteFile(p, []byte("  s3cret \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadSecretFile(p); err != nil || got != "s3cret" {
		t.Fatalf("ReadSecretFile = %q, %v", got, err)
	}
	_ = os.WriteFile(p, []byte("\n"), 0o600)
	if _, err := ReadSecretFile(p); err == nil {
		t.Fatal("an empty token file was accepted")
	}
	if _, err := ReadSecretFile(dir + "/missing"); err == nil {
		t.Fatal("a missing file was accepted")
	}
}
