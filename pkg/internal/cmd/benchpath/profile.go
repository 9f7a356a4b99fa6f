package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// profilePath is the path profiled: the whole chain with a session key,
// or the longest chosen path with a profiler.
func (b *bench) profilePath() (path, bool) {
	for _, name := range []string{"chain-key", "chain", "spine"} {
		for _, p := range b.paths {
			if p.Name == name {
				return p, true
			}
		}
	}
	return path{}, false
}

// profileRow is the load the profiles are taken under: 1 KiB (or the
// smallest size), the most clients, not streamed.
func (b *bench) profileRow() row {
	r := row{Size: b.rows[0].Size, Clients: 1}
	for _, x := range b.rows {
		if x.Size == 1024 {
			r.Size = 1024
		}
		r.Clients = max(r.Clients, x.Clients)
	}
	return r
}

// profileURLs are the admin listeners (with /debug/pprof/) of the tiers
// that have a profiler.
func profileURLs(ep stack.Endpoints) map[string]string {
	return map[string]string{
		"gateway": strings.TrimSuffix(ep.GatewayMetrics, "/metrics"),
		"hub":     strings.TrimSuffix(ep.HubMetrics, "/metrics"),
		"pylon":   strings.TrimSuffix(ep.PylonMetrics[cluster], "/metrics"),
	}
}

// profile takes a CPU and an allocation profile of every profiled tier
// on the profile path, all at once, over -profile-seconds under the
// profile row's load, in a run of its own after the measured rows (the
// profiler's cost is not in any table). It writes the profiles and
// `go tool pprof -top` summaries to profiles/.
func (b *bench) profile(ctx context.Context, ep stack.Endpoints) error {
	p, ok := b.profilePath()
	if !ok {
		return nil
	}
	r := b.profileRow()
	dir := filepath.Join(b.o.out, "profiles")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	q := newRequester(p, r, ep, b.o.outTokens)
	client := newClient(r.Clients)
	defer client.CloseIdleConnections()
	spec := loadSpec{clients: r.Clients, duration: b.o.warmup, sse: q.sse, request: q.request}
	runLoad(ctx, client, spec)
	secs := int(b.o.profileTime.Seconds())
	// The load outlasts the profiles by a second on each side.
	spec.duration = b.o.profileTime + 2*time.Second
	var (
		wg   sync.WaitGroup
		lr   loadResult
		mu   sync.Mutex
		errs []error
	)
	wg.Go(func() { lr = runLoad(ctx, client, spec) })
	urls := profileURLs(ep)
	fetch := &http.Client{Timeout: b.o.profileTime + 30*time.Second}
	for _, t := range p.relays() {
		base, ok := urls[t]
		if !ok {
			continue
		}
		for _, kind := range []string{"profile", "allocs"} {
			wg.Go(func() {
				err := fetchProfile(ctx, fetch, base+"/debug/pprof/"+kind+"?seconds="+strconv.Itoa(secs),
					filepath.Join(dir, t+"-"+profileFile(kind)+".pb.gz"), time.Second)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s %s: %w", t, kind, err))
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	b.profiled = fmt.Sprintf("%s at %s, %d s (%d requests at %.0f req/s during the load)", p.Label, r, secs, lr.OK,
		float64(lr.OK)/max(lr.Elapsed.Seconds(), 1e-9))
	return b.summarise(ctx, dir, p)
}

// profileFile names a profile kind's file.
func profileFile(kind string) string {
	if kind == "profile" {
		return "cpu"
	}
	return kind
}

// fetchProfile waits delay (so the load is up), then saves url's answer
// (a profile, or a /metrics page).
func fetchProfile(ctx context.Context, c *http.Client, url, file string, delay time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(delay):
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	f, err := os.Create(file) //nolint:gosec // G304: the run's own output folder
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// topViews are the `go tool pprof -top` views written per profile kind.
var topViews = map[string][][]string{
	"cpu":    {{"-top"}, {"-top", "-cum"}},
	"allocs": {{"-top", "-sample_index=alloc_space"}, {"-top", "-sample_index=alloc_objects"}},
}

// summarise writes <tier>-<kind>.txt beside each profile: its
// `go tool pprof -top` views.
func (b *bench) summarise(ctx context.Context, dir string, p path) error {
	for _, t := range p.relays() {
		for _, kind := range []string{"cpu", "allocs"} {
			prof := filepath.Join(dir, t+"-"+kind+".pb.gz")
			if _, err := os.Stat(prof); err != nil {
				continue
			}
			var sb strings.Builder
			for _, view := range topViews[kind] {
				args := append(append([]string{"tool", "pprof"}, view...), "-nodecount="+strconv.Itoa(b.o.topN*4), prof)
				out, err := exec.CommandContext(ctx, b.o.goCmd, args...).CombinedOutput() //nolint:gosec // G204: go tool pprof on our own file
				if err != nil {
					return fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, out)
				}
				fmt.Fprintf(&sb, "$ go %s\n%s\n", strings.Join(args, " "), out)
			}
			if err := os.WriteFile(filepath.Join(dir, t+"-"+kind+".txt"), []byte(sb.String()), 0o644); err != nil { //nolint:gosec // G306: a summary
				return err
			}
		}
	}
	return nil
}

// profileTop is the first lines of one tier's flat CPU view.
type profileTop struct {
	Tier  string
	Lines []string
}

// readProfileTops reads the flat CPU view of each <tier>-cpu.txt in dir:
// its header and the n costliest functions.
func readProfileTops(dir string, n int) []profileTop {
	files, _ := filepath.Glob(filepath.Join(dir, "*-cpu.txt"))
	slices.Sort(files)
	var out []profileTop
	for _, f := range files {
		b, err := os.ReadFile(f) //nolint:gosec // G304: the run's own output folder
		if err != nil {
			continue
		}
		out = append(out, profileTop{Tier: strings.TrimSuffix(filepath.Base(f), "-cpu.txt"), Lines: flatTop(string(b), n)})
	}
	return out
}

// flatTop is the "Duration" and "Showing nodes" headers and the first n
// rows of the first -top view in a summary file.
func flatTop(summary string, n int) []string {
	var out []string
	rows := -1 // -1 until the view's column header
	for line := range strings.SplitSeq(summary, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case rows >= 0 && (trimmed == "" || rows == n):
			return out
		case rows >= 0:
			out = append(out, line)
			rows++
		case strings.HasPrefix(trimmed, "flat "):
			out = append(out, line)
			rows = 0
		case strings.HasPrefix(line, "Duration:") || strings.HasPrefix(line, "Showing nodes"):
			out = append(out, trimmed)
		}
	}
	return out
}
