package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// reloadDebounce is the hub's --lb-config-reload-debounce-ms here: long
// enough that a SIGHUP sent right after a write is what applies it (the
// watch then finds the content unchanged), short enough for 20 switches.
const reloadDebounce = time.Second

// lbHash is the hub's name for a config: the first 12 hex digits of the
// SHA-256 of the file's bytes, computed here independently.
func lbHash(content string) string {
	sum := sha256.Sum256([]byte(content))
	return hex.EncodeToString(sum[:6])
}

// lbDir is an lb-config directory in the layout a Kubernetes ConfigMap
// volume has: path is a symlink to ..data/lb-config.json and ..data a
// symlink to a timestamped directory.
type lbDir struct {
	t    *testing.T
	dir  string
	path string
	gen  int
	old  string // the timestamped directory ..data pointed to before
}

func newLBDir(t *testing.T, content string) *lbDir {
	d := &lbDir{t: t, dir: t.TempDir()}
	d.path = filepath.Join(d.dir, "lb-config.json")
	d.publish(content)
	if err := os.Symlink(filepath.Join("..data", "lb-config.json"), d.path); err != nil {
		t.Fatal(err)
	}
	return d
}

// publish is what the kubelet does on a ConfigMap update: a new
// timestamped directory, a new ..data symlink renamed over the old one,
// the old directory removed.
func (d *lbDir) publish(content string) {
	t := d.t
	d.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", d.gen, d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, ts), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, ts, "lb-config.json"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if d.old != "" {
		if err := os.RemoveAll(filepath.Join(d.dir, d.old)); err != nil {
			t.Fatal(err)
		}
	}
	d.old = ts
}

// replace is an editor's save: write a temporary file, rename it over the
// path (which replaces the ConfigMap symlink by a plain file the first
// time).
func (d *lbDir) replace(content string) {
	tmp := filepath.Join(d.dir, ".lb-config.json.swp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, d.path); err != nil {
		d.t.Fatal(err)
	}
}

// lbDebug is /debug/state's lb-config section.
type lbDebug struct {
	Config struct {
		DefaultLB string `json:"default_lb"`
		LB        struct {
			Hash         string            `json:"hash"`
			Path         string            `json:"path"`
			LoadedAt     time.Time         `json:"loaded_at"`
			DefaultLB    string            `json:"default_lb"`
			Models       map[string]string `json:"models"`
			LastReloadOK bool              `json:"last_reload_ok"`
			LastRejected *struct {
				Hash  string `json:"hash"`
				Error string `json:"error"`
			} `json:"last_rejected"`
		} `json:"lb_config"`
	} `json:"config"`
}

// lbSwitch is one step of the test: a config and how it reaches the hub.
type lbSwitch struct {
	alg     string // the configured algorithm; "" for the invalid file
	content string
	hash    string
	sighup  bool // SIGHUP right after the write; else the watch applies it
	cm      bool // a ConfigMap ..data swap; else an editor's rename
}

// TestLBConfigReload runs a hub over two clusters under a steady load of
// concurrent streams while the lb-config changes 20 times across the six
// algorithms, by SIGHUP and by the file watch, through ConfigMap ..data
// swaps and editor renames, one of them an invalid file. No request fails;
// every answer names a config that was valid, never one older than the
// config the test had seen active when the request started; the invalid
// file is rejected (counted, logged with its field, the old config still
// active); /debug/state and the metrics show each config with its
// algorithms once it is active.
func TestLBConfigReload(t *testing.T) {
	e := newEnv(t)
	algs := []string{"round-robin", "random", "power-of-n", "pulsar", "wait-and-widen", "pulsar-wait-and-widen"}
	config := func(i int, alg string) string {
		// rev-<i> makes every version's bytes (and hash) unique, and is a
		// second model whose algorithm the checks read.
		return fmt.Sprintf(`{"default":%q,"models":{%q:{"algorithm":%q},"rev-%d":%q}}`, alg, model, alg, i, algs[(i+1)%len(algs)])
	}
	const invalidAt = 11
	invalid := `{"models":{"` + model + `":{"algorithm":"power-of-n","last_cluster_affinity":true}}}`
	initial := config(0, algs[0])
	var steps []lbSwitch
	for i := 1; i <= 20; i++ {
		s := lbSwitch{sighup: i%2 == 1, cm: i <= 4}
		if i == invalidAt {
			s.content = invalid
		} else {
			s.alg = algs[i%len(algs)]
			s.content = config(i, s.alg)
		}
		s.hash = lbHash(s.content)
		steps = append(steps, s)
	}

	dir := newLBDir(t, initial)
	h := e.hub("--lb-config-path", dir.path, "--lb-config-reload-debounce-ms", fmt.Sprint(reloadDebounce.Milliseconds()))
	a := e.pylon(h, e.mock("--ttft-ms", "1", "--token-delay-ms", "1"), "pylon-a", "--initial-input-tps", "50000")
	b := e.pylon(h, e.mock("--ttft-ms", "1", "--token-delay-ms", "1"), "pylon-b", "--initial-input-tps", "50000")
	e.waitRegistered(h, a, b)

	// order maps each valid config's hash to its place in the sequence;
	// active is the place of the latest one the test has seen active.
	order := map[string]int{lbHash(initial): 0}
	for i, s := range steps {
		if s.alg != "" {
			order[s.hash] = i + 1
		}
	}
	var active atomic.Int64

	// The load: workers sending streams back to back for the whole test.
	const workers = 4
	type outcome struct {
		floor   int // active when the request started
		hash    string
		ok      bool
		cluster string
		detail  string
	}
	ctx, stopLoad := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	results := make([][]outcome, workers)
	// lastHash is the hash of worker 0's latest answer, for the wait at
	// the end; results is read only once the workers have stopped.
	var lastHash atomic.Pointer[string]
	for w := range workers {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				hdr := http.Header{}
				hdr.Set("x-cache-affinity-key", fmt.Sprintf("mt:v1:session:w%d-%d", w, n%8))
				floor := int(active.Load())
				r := h.stream(context.Background(), e.cl, chat{Content: promptOf(32), OutputTokens: 4, Header: hdr})
				hash := r.Header.Get("x-stargate-lb-config-hash")
				results[w] = append(results[w], outcome{floor: floor, hash: hash,
					ok: r.ok(4), cluster: r.Header.Get("x-stargate-cluster-id"), detail: r.String()})
				if w == 0 {
					lastHash.Store(&hash)
				}
			}
		})
	}
	t.Cleanup(func() { stopLoad(); wg.Wait() })

	state := func() (lbDebug, error) {
		var d lbDebug
		return d, getJSON(e.cl, h.adminURL+"/debug/state", "", &d)
	}
	rejectedBefore := mustScrape(t, e.cl, h.metricsURL).value("stargate_lb_config_reloads_total", "result", "rejected")
	activeHash, activeAlg := lbHash(initial), algs[0]
	started := time.Now()
	for i, s := range steps {
		if s.cm {
			dir.publish(s.content)
		} else {
			dir.replace(s.content)
		}
		if s.sighup {
			if err := h.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		if s.alg == "" {
			waitFor(t, 10*time.Second, "the invalid file to be rejected", func() (bool, string) {
				m, err := scrape(e.cl, h.metricsURL)
				if err != nil {
					return false, err.Error()
				}
				got := m.value("stargate_lb_config_reloads_total", "result", "rejected")
				return got == rejectedBefore+1, fmt.Sprintf("rejected %v", got)
			})
			d, err := state()
			if err != nil {
				t.Fatal(err)
			}
			lb := d.Config.LB
			if lb.Hash != activeHash || lb.LastReloadOK || lb.LastRejected == nil || lb.LastRejected.Hash != s.hash ||
				!strings.Contains(lb.LastRejected.Error, "last_cluster_affinity") {
				t.Errorf("after the invalid file: %+v", lb)
			}
			continue
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("switch %d (%s) to be active", i+1, s.alg), func() (bool, string) {
			d, err := state()
			if err != nil {
				return false, err.Error()
			}
			return d.Config.LB.Hash == s.hash, "active " + d.Config.LB.Hash + ", want " + s.hash
		})
		active.Store(int64(i + 1))
		activeHash, activeAlg = s.hash, s.alg
		d, err := state()
		if err != nil {
			t.Fatal(err)
		}
		rev := fmt.Sprintf("rev-%d", i+1)
		if lb := d.Config.LB; d.Config.DefaultLB != s.alg || lb.DefaultLB != s.alg || lb.Models[model] != s.alg ||
			lb.Models[rev] != algs[(i+2)%len(algs)] || len(lb.Models) != 2 || lb.Path != dir.path {
			t.Errorf("switch %d: /debug/state %+v", i+1, d.Config)
		}
		m := mustScrape(t, e.cl, h.metricsURL)
		if m.value("stargate_lb_config_info", "hash", s.hash, "model", model, "algorithm", s.alg) != 1 ||
			m.value("stargate_lb_config_info", "hash", s.hash, "model", "", "algorithm", s.alg) != 1 ||
			m.value("stargate_lb_config_info", "hash", s.hash) != 3 || m.value("stargate_lb_config_info") != 3 {
			t.Errorf("switch %d: lb_config_info does not show %s alone with %s", i+1, s.hash, s.alg)
		}
	}
	t.Logf("20 switches in %v; last active %s (%s)", time.Since(started).Round(time.Millisecond), activeHash, activeAlg)
	// Let the load run a moment under the last config, then stop it.
	waitFor(t, 10*time.Second, "requests under the last config", func() (bool, string) {
		h := lastHash.Load()
		return h != nil && *h == activeHash, "not yet"
	})
	stopLoad()
	wg.Wait()

	total, perHash, clusters := 0, map[string]int{}, map[string]int{}
	for w := range workers {
		for _, o := range results[w] {
			total++
			perHash[o.hash]++
			clusters[o.cluster]++
			idx, valid := order[o.hash]
			switch {
			case !o.ok:
				t.Errorf("worker %d: a failed request: %s", w, o.detail)
			case !valid:
				t.Errorf("worker %d: hash %q is no valid config: %s", w, o.hash, o.detail)
			case idx < o.floor:
				t.Errorf("worker %d: answered by config #%d, older than #%d active at its start", w, idx, o.floor)
			}
		}
	}
	t.Logf("%d requests, %d configs seen, clusters %v", total, len(perHash), clusters)
	if len(perHash) < 10 {
		t.Errorf("only %d configs served requests: the load did not span the switches", len(perHash))
	}

	m := mustScrape(t, e.cl, h.metricsURL)
	if got := m.value("stargate_lb_config_reloads_total", "result", "rejected"); got != rejectedBefore+1 {
		t.Errorf("rejected reloads: %v, want exactly one", got)
	}
	if got := m.value("stargate_lb_config_reloads_total", "result", "applied"); got != 19 {
		t.Errorf("applied reloads: %v, want 19", got)
	}
	out := h.out.String()
	if !strings.Contains(out, "lb config reload rejected") || !strings.Contains(out, "field=last_cluster_affinity") {
		t.Errorf("no rejection log naming the field")
	}
	for i, s := range steps {
		if s.sighup && s.alg != "" && !logged(out, "msg=\"lb config reloaded\"", "trigger=sighup", " hash="+s.hash) {
			t.Errorf("switch %d: no reload by SIGHUP logged for %s", i+1, s.hash)
		}
		if !s.sighup && s.alg != "" && !logged(out, "msg=\"lb config reloaded\"", "trigger=watch", " hash="+s.hash) {
			t.Errorf("switch %d: no reload by the watch logged for %s", i+1, s.hash)
		}
	}
}

// logged reports whether one line of out holds every part.
func logged(out string, parts ...string) bool {
	for line := range strings.Lines(out) {
		all := true
		for _, p := range parts {
			if !strings.Contains(line, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}
