package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
	"github.com/stargate-router/stargate/pylon/internal/config"
	"github.com/stargate-router/stargate/pylon/internal/stats"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// hangGuard bounds waits for the code under test so a bug fails instead of
// hanging; it never proves timing.
const hangGuard = 10 * time.Second

func validConfig(t *testing.T, upstream string) config.Config {
	t.Helper()
	c := config.Default()
	c.UpstreamBaseURL = upstream
	c.ModelNames = "m1, m2"
	c.HealthPaths = "/ready"
	c.InsecureNoAuth = true
	if err := c.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return c
}

// One engine is configured as UpstreamBaseURL, several as
// UpstreamBaseURLs, in both the collector and the proxy; the proxy takes
// the derived lists and the flags it needs.
func TestConfigSharesFollowTheEngineCount(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	one := validConfig(t, "http://127.0.0.1:8090/")
	if s := statsConfig(one, clk, nil, nil, nil); s.UpstreamBaseURL != "http://127.0.0.1:8090" || s.UpstreamBaseURLs != nil {
		t.Errorf("one engine: stats %q / %q", s.UpstreamBaseURL, s.UpstreamBaseURLs)
	}
	p := proxyConfig(one, clk, nil, nil)
	if p.UpstreamBaseURL != "http://127.0.0.1:8090" || p.UpstreamBaseURLs != nil {
		t.Errorf("one engine: proxy %q / %q", p.UpstreamBaseURL, p.UpstreamBaseURLs)
	}
	if !slices.Equal(p.HealthPaths, []string{"/ready"}) || !slices.Equal(p.RetryableStatusCodes, []int{429, 503}) || p.PriorityCeiling != 3600 {
		t.Errorf("proxy config: health %q, codes %v, ceiling %d", p.HealthPaths, p.RetryableStatusCodes, p.PriorityCeiling)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("proxy config invalid: %v", err)
	}

	two := validConfig(t, "http://a:1,http://b:2/")
	want := []string{"http://a:1", "http://b:2"}
	if s := statsConfig(two, clk, nil, nil, nil); s.UpstreamBaseURL != "" || !slices.Equal(s.UpstreamBaseURLs, want) {
		t.Errorf("two engines: stats %q / %q", s.UpstreamBaseURL, s.UpstreamBaseURLs)
	}
	if p := proxyConfig(two, clk, nil, nil); p.UpstreamBaseURL != "" || !slices.Equal(p.UpstreamBaseURLs, want) {
		t.Errorf("two engines: proxy %q / %q", p.UpstreamBaseURL, p.UpstreamBaseURLs)
	}
	two.EngineAffinity, two.EngineAffinityLoadFactor, two.MaxEngineConcurrency = "off", 2, 32
	if p := proxyConfig(two, clk, nil, nil); p.EngineAffinity || p.EngineAffinityLoadFactor != 2 || p.MaxEngineConcurrency != 32 {
		t.Errorf("engine affinity: proxy %v %v %d, want off 2 32", p.EngineAffinity, p.EngineAffinityLoadFactor, p.MaxEngineConcurrency)
	}
}

// The registration lists only published models, active with their
// statistics, and defaults the cluster id to the inference server id.
func TestRegistrationListsPublishedModels(t *testing.T) {
	cfg := validConfig(t, "http://127.0.0.1:8090")
	coll, err := stats.New(stats.Config{UpstreamBaseURL: cfg.UpstreamBaseURL, Clock: clock.NewFake(time.Unix(0, 0)), InitialInputTPS: 1000})
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: cfg, collector: coll, tracker: newTracker(coll)}
	s := &snapshotter{a: a}
	coll.AddModel("m1")
	coll.AddModel("m2")
	a.tracker.publish("m1")
	a.tracker.publish("m1")

	reg := s.Registration()
	if reg.InferenceServerID != "pylon" || reg.ClusterID != "pylon" {
		t.Errorf("ids %q / %q, want pylon / pylon", reg.InferenceServerID, reg.ClusterID)
	}
	if len(reg.Models) != 1 {
		t.Fatalf("models %v, want m1 only", reg.Models)
	}
	e := reg.Models["m1"]
	if e.Status != protocol.StatusActive || e.Stats == nil || e.Stats.LastMeanInputTPS != 1000 {
		t.Errorf("m1 entry %+v", e)
	}
	if !a.tracker.Published("m1") || a.tracker.Published("m2") {
		t.Errorf("published: m1 %v, m2 %v", a.tracker.Published("m1"), a.tracker.Published("m2"))
	}

	// A published model whose generation is gone is advertised inactive.
	coll.RemoveModel("m1")
	if e := s.Registration().Models["m1"]; e.Status != protocol.StatusInactive || e.Stats != nil {
		t.Errorf("m1 after removal %+v, want inactive without stats", e)
	}
}

// One collector notification wakes every registration stream waiting.
func TestBroadcasterWakesEveryWaiter(t *testing.T) {
	src := make(chan struct{}, 1)
	b := newBroadcaster(src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	w1, w2 := b.wait(), b.wait()
	src <- struct{}{}
	for i, w := range []<-chan struct{}{w1, w2} {
		select {
		case <-w:
		case <-time.After(hangGuard):
			t.Fatalf("waiter %d not woken", i)
		}
	}
	select {
	case <-b.wait():
		t.Fatal("the next wait must block until the next change")
	default:
	}
}
