// Package e2e runs the observability chart against a real Prometheus: the
// demo stack under load, scraped by Debian's prometheus binary on
// loopback with the chart's rules loaded; every panel query and recording
// rule must return data. It writes a report and one picture per
// dashboard (`make observe-e2e`).
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stargate-router/stargate/tools/obs/internal/demostack"
	"github.com/stargate-router/stargate/tools/obs/internal/promapi"
)

// Config is a prometheus.yml scraping targets every interval and loading
// the rule files.
func Config(targets []demostack.Target, ruleFiles []string, interval time.Duration) ([]byte, error) {
	type static struct {
		Targets []string          `yaml:"targets"`
		Labels  map[string]string `yaml:"labels,omitempty"`
	}
	type job struct {
		Name    string   `yaml:"job_name"`
		Path    string   `yaml:"metrics_path"`
		Statics []static `yaml:"static_configs"`
	}
	var jobs []job
	index := map[string]int{}
	for _, t := range targets {
		host, path, err := hostPath(t.URL)
		if err != nil {
			return nil, err
		}
		i, ok := index[t.Job]
		if !ok {
			i = len(jobs)
			index[t.Job] = i
			jobs = append(jobs, job{Name: t.Job, Path: path})
		}
		if jobs[i].Path != path {
			return nil, fmt.Errorf("job %s: targets on %s and %s; one metrics path per job", t.Job, jobs[i].Path, path)
		}
		jobs[i].Statics = append(jobs[i].Statics, static{Targets: []string{host}, Labels: t.Labels})
	}
	iv := model(interval)
	return yaml.Marshal(map[string]any{
		"global":         map[string]string{"scrape_interval": iv, "evaluation_interval": iv, "scrape_timeout": iv},
		"rule_files":     ruleFiles,
		"scrape_configs": jobs,
	})
}

func hostPath(u string) (host, path string, err error) {
	rest, ok := strings.CutPrefix(u, "http://")
	if !ok {
		return "", "", fmt.Errorf("target %s: want http://host:port/path", u)
	}
	host, path, ok = strings.Cut(rest, "/")
	if !ok || host == "" {
		return "", "", fmt.Errorf("target %s: want http://host:port/path", u)
	}
	return host, "/" + path, nil
}

// model writes a duration the way Prometheus' config wants it (2s, 1m).
func model(d time.Duration) string {
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// server is a running Prometheus.
type server struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit, once done is closed
	api  *promapi.Client
}

// startPrometheus runs bin with config in dir on a free loopback port and
// waits until it is ready.
func startPrometheus(ctx context.Context, bin, dir string, config []byte, log io.Writer) (*server, error) {
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, config, 0o600); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"), //nolint:gosec // G204: the Makefile names the binary
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	s := &server{cmd: cmd, done: make(chan struct{}), api: &promapi.Client{Base: "http://" + addr, HTTP: &http.Client{Timeout: 30 * time.Second}}}
	go func() { s.err = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for !s.api.Ready(ctx) {
		select {
		case <-s.done:
			return nil, fmt.Errorf("prometheus exited at startup (its log is above with -v): %w", s.err)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("prometheus was not ready within 30 s")
		}
	}
	return s, nil
}

// stop ends Prometheus (SIGTERM, then SIGKILL after 10 s) and waits.
func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}
