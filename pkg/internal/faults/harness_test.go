package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

var (
	binDir = flag.String("bin", os.Getenv("STARGATE_FAULTS_BIN"),
		"folder holding gateway, hub, pylon and mock-engine (make build writes ./bin); the suite skips without it")
	keepLogs = flag.Bool("keep-logs", false, "keep every test's child logs, not only a failed test's")
)

// TestMain fails the package if a test leaves a goroutine behind; the
// child processes are stopped by each test's cleanup, failed or not.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// model is the one model of every fleet here.
const model = "fault-model"

// fleet is the suite's deployment: one region of n equal clusters named
// a, b, c, ..., 8 slots each, 10 ms per output token, a 10 s wait for a
// free slot (so load alone never fails a request) and no rate limit.
func fleet(n int) stack.Fleet {
	r := stack.Region{Name: "local", HealthDelayMs: 1, TTFTMs: 10}
	for i := range n {
		r.Clusters = append(r.Clusters, stack.Cluster{ID: string(rune('a' + i)), ColdTPS: 64_000, WarmTPS: 133_000})
	}
	return stack.Fleet{Model: model, Slots: 8, TokenDelayMs: 10, QueueAdmission: true, MaxWaitMs: 10_000,
		Regions: []stack.Region{r}}
}

// startStack starts o on loopback from -bin and stops it when the test
// ends, failed or not. A failed test keeps its child logs and names their
// folder.
func startStack(t *testing.T, o stack.Options) *stack.Stack {
	t.Helper()
	st, _ := startStackLogs(t, o)
	return st
}

// startStackLogs is startStack that also returns the folder of the
// children's logs (one <child>.log each), for a test that reads them.
func startStackLogs(t *testing.T, o stack.Options) (*stack.Stack, string) {
	t.Helper()
	if *binDir == "" {
		t.Skip("the fault suite needs the binaries: -args -bin <dir> or STARGATE_FAULTS_BIN (make faults)")
	}
	bin, err := filepath.Abs(*binDir)
	if err != nil {
		t.Fatal(err)
	}
	if missing := stack.MissingBinaries(bin); len(missing) > 0 {
		t.Fatalf("%s lacks %v: build them first", bin, missing)
	}
	logs, err := os.MkdirTemp("", "stargate-faults-"+strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *keepLogs {
			t.Logf("child logs: %s", logs)
			return
		}
		_ = os.RemoveAll(logs)
	})
	o.BinDir, o.LogDir, o.Principal = bin, logs, "faults"
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	st, err := stack.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return st, logs
}

// httpClient is a client of its own per test, without a global timeout
// (each request carries its own deadline) and closed at cleanup, so no
// keep-alive goroutine outlives the test.
func httpClient(t *testing.T) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// getJSON decodes url's JSON answer into v.
func getJSON(ctx context.Context, c *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, v)
}

// put sends a JSON PUT that must answer 200.
func put(ctx context.Context, c *http.Client, url, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT %s %s: %d %s", url, body, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// engineControl is the part of a mock engine's GET /test-control the
// suite reads.
type engineControl struct {
	Counters []struct {
		Endpoint     string `json:"endpoint"`
		RequestClass string `json:"request_class"`
		Count        uint64 `json:"count"`
	} `json:"counters"`
	FaultsInjected map[string]uint64 `json:"faults_injected"`
	KVStatsReads   uint64            `json:"kv_stats_reads"`
}

// chats is how many chat requests from clients (not the pylon's own) the
// engine has received.
func (c engineControl) chats() uint64 {
	var n uint64
	for _, ct := range c.Counters {
		if ct.Endpoint == "chat_completions" && ct.RequestClass == "api_gateway" {
			n += ct.Count
		}
	}
	return n
}

func readControl(t *testing.T, c *http.Client, engine string) engineControl {
	t.Helper()
	var ec engineControl
	if err := getJSON(t.Context(), c, engine+"/test-control", &ec); err != nil {
		t.Fatal(err)
	}
	return ec
}

var sampleLine = regexp.MustCompile(`(?m)^([a-zA-Z_:][^ ]*) (\S+)$`)

// scrape reads url's Prometheus text into series -> value (the series
// with its labels as written).
func scrape(ctx context.Context, c *http.Client, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range sampleLine.FindAllStringSubmatch(string(b), -1) {
		if v, err := strconv.ParseFloat(m[2], 64); err == nil {
			out[m[1]] = v
		}
	}
	return out, nil
}

// sum adds every series of name whose labels contain each of want.
func sum(metrics map[string]float64, name string, want ...string) float64 {
	var total float64
	for series, v := range metrics {
		base, labels, _ := strings.Cut(series, "{")
		if base != name {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(labels, w)
		}
		if ok {
			total += v
		}
	}
	return total
}

// eventually polls cond every 50 ms until it holds or within passes; it
// is how the suite waits for a process to notice something, never a
// fixed sleep. It returns how long it took.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		select {
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return time.Since(start)
}
