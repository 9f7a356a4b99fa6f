package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHelpAndBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run(t.Context(), []string{"--help"}, func(string) string { return "" }, &out, &errb); rc != 0 {
		t.Fatalf("--help exit %d", rc)
	}
	for _, want := range []string{"--kv-cache-capacity-tokens", "MOCK_ENGINE_PREFILL_TOKENS_PER_S", "--disable-stats-stream", "64000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
	errb.Reset()
	env := map[string]string{"MOCK_ENGINE_TIME_SCALE": "-2"}
	if rc := run(t.Context(), nil, func(k string) string { return env[k] }, io.Discard, &errb); rc != 2 || !strings.Contains(errb.String(), "--time-scale") {
		t.Fatalf("bad env: exit %d, stderr %q", rc, errb.String())
	}
}

// TestServesAndDrainsOnCancel runs the binary's run function on an
// ephemeral port, serves one request, then cancels (as SIGTERM does) and
// expects a clean exit.
func TestServesAndDrainsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--log-format", "json", "--ttft-ms", "0", "--token-delay-ms", "0"},
			func(string) string { return "" }, io.Discard, pw)
		pw.Close()
	}()
	logs := bufio.NewScanner(pr)
	addr := ""
	for addr == "" && logs.Scan() {
		var rec map[string]any
		if json.Unmarshal(logs.Bytes(), &rec) == nil && rec["msg"] == "listening" {
			addr, _ = rec["addr"].(string)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"chat.completion"`) {
		t.Fatalf("status %d body %s", resp.StatusCode, body)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	if rc := <-done; rc != 0 {
		t.Fatalf("exit %d after cancel", rc)
	}
}
