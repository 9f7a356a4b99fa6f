package app

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/lbreload"
)

// lbState is /debug/state's config section as far as lb-config goes.
type lbState struct {
	Config struct {
		DefaultLB string `json:"default_lb"`
		LBConfig  struct {
			lbreload.Status
			Watch bool `json:"watch"`
		} `json:"lb_config"`
	} `json:"config"`
}

func (r *running) lbState(t *testing.T) lbState {
	t.Helper()
	code, body := get(t, r.client, r.metricsURL+"/debug/state", "")
	if code != http.StatusOK {
		t.Fatalf("/debug/state: %d %s", code, body)
	}
	var st lbState
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// waitHash polls /debug/state until the active hash is want; the file
// watch is real, so only the failure deadline is a time.
func (r *running) waitHash(t *testing.T, want string) lbState {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		st := r.lbState(t)
		if st.Config.LBConfig.Hash == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("active hash %s, want %s", st.Config.LBConfig.Hash, want)
		}
		<-poll.C
	}
}

// /debug/state reports the configured algorithms, not a fixed default; a
// change of the file is applied by the watch and shows there and in the
// metrics; an invalid file is rejected and shown with its error while the
// old config stays active; SIGHUP's path (ReloadLBConfig) of the same
// content changes nothing.
func TestLBConfigReloadAndDebugState(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lb-config.json")
	write := func(content string) string {
		t.Helper()
		tmp := filepath.Join(dir, "tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		return lbreload.Hash([]byte(content))
	}
	first := write(`{"default":"round-robin","models":{"m":"pulsar"}}`)
	r := startApp(t, func(c *Config) {
		c.LBConfigPath = path
		c.LBConfigReloadDebounce = 20 * time.Millisecond
	})
	st := r.lbState(t)
	lb := st.Config.LBConfig
	if st.Config.DefaultLB != "round-robin" || lb.DefaultLB != "round-robin" || lb.Models["m"] != "pulsar" ||
		lb.Hash != first || lb.Path != path || !lb.Watch || lb.LoadedAt.IsZero() {
		t.Fatalf("at startup: %+v", st)
	}

	second := write(`{"default":"random"}`)
	st = r.waitHash(t, second)
	if st.Config.DefaultLB != "random" || len(st.Config.LBConfig.Models) != 0 {
		t.Errorf("after the change: %+v", st)
	}
	_, metrics := get(t, r.client, r.metricsURL+"/metrics", "")
	for _, want := range []string{
		`stargate_lb_config_info{algorithm="random",hash="` + second + `",model=""} 1`,
		`stargate_lb_config_reloads_total{result="applied"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	write(`{"default":"no-such-algorithm"}`)
	deadline := time.Now().Add(10 * time.Second)
	for r.lbState(t).Config.LBConfig.LastRejected == nil {
		if time.Now().After(deadline) {
			t.Fatal("the invalid file was never rejected")
		}
		time.Sleep(10 * time.Millisecond) // polling an outcome, not timing it
	}
	lb = r.lbState(t).Config.LBConfig
	if lb.Hash != second || lb.LastReloadOK || !strings.Contains(lb.LastRejected.Error, "no-such-algorithm") {
		t.Errorf("after the invalid file: %+v", lb)
	}
	r.app.ReloadLBConfig("sighup")
	if lb := r.lbState(t).Config.LBConfig; lb.Hash != second {
		t.Errorf("a reload of the same invalid file changed the hash to %s", lb.Hash)
	}
}
