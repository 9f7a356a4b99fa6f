package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/workload"
)

// fakeStack is an ArmStack that records its calls and starts nothing.
type fakeStack struct {
	mu      sync.Mutex
	events  []string
	targets map[string]ArmTarget // by arm name
	// lbConfigs is the LBConfig each Up saw, by arm name.
	lbConfigs map[string]string
	// up is called by Up after recording it (nil = nothing more).
	up func(arm Arm, armDir string) error
	// downErr is what Down returns.
	downErr error
	// downCtx records whether Down's context was live and had a deadline.
	downCtx []string
}

var _ ArmStack = (*fakeStack)(nil)

func (f *fakeStack) Up(_ context.Context, arm Arm, armDir string) (ArmTarget, error) {
	f.mu.Lock()
	f.events = append(f.events, "up "+arm.Name)
	if f.lbConfigs == nil {
		f.lbConfigs = map[string]string{}
	}
	f.lbConfigs[arm.Name] = arm.LBConfig
	f.mu.Unlock()
	if err := os.WriteFile(filepath.Join(armDir, "versions.txt"), []byte(arm.Name), 0o600); err != nil {
		return ArmTarget{}, err
	}
	if f.up != nil {
		if err := f.up(arm, armDir); err != nil {
			return ArmTarget{}, err
		}
	}
	return f.targets[arm.Name], nil
}

func (f *fakeStack) Down(ctx context.Context, armDir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, "down "+filepath.Base(armDir))
	_, hasDeadline := ctx.Deadline()
	f.downCtx = append(f.downCtx, fmt.Sprintf("err=%v deadline=%v", ctx.Err(), hasDeadline))
	if err := os.WriteFile(filepath.Join(armDir, "engines-after.txt"), nil, 0o600); err != nil {
		return err
	}
	return f.downErr
}

func (f *fakeStack) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// stackCampaign is a one-repeat smoke campaign over the two arms of
// writeArms.
func stackCampaign(t *testing.T, st ArmStack, send Sender) *Campaign {
	t.Helper()
	dir := t.TempDir()
	arms, err := ReadArms(writeArms(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	specs, err := ExpandSuites([]string{"smoke"}, workload.SuiteParams{Seed: 1, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	return &Campaign{Out: filepath.Join(dir, "results"), Arms: arms, Suites: specs, Log: io.Discard, Stack: st,
		Template: RunSpec{Client: Client{HTTP: NewHTTPClient(), Target: TargetGateway, APIKey: "template-key", Stream: true, Clock: clock.Real{}},
			Send: send}}
}

// TestCampaignStackPerArm runs each arm against its own real mock engine,
// reached only through the URL and key its stack's Up returned.
func TestCampaignStackPerArm(t *testing.T) {
	urlP2, seenP2 := startMock(t)
	urlWW, seenWW := startMock(t)
	st := &fakeStack{targets: map[string]ArmTarget{"p2": {URL: urlP2, APIKey: "key-p2"}, "ww": {URL: urlWW, APIKey: "key-ww"}}}
	c := stackCampaign(t, st, nil)
	rep, err := c.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := st.calls(), []string{"up p2", "down p2", "up ww", "down ww"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	for arm, seen := range map[string][]seen{"p2": seenP2(), "ww": seenWW()} {
		if len(seen) != rep.Suites[0].Requests {
			t.Errorf("%s's engine got %d requests, want the %d of its run", arm, len(seen), rep.Suites[0].Requests)
		}
		for _, s := range seen {
			if got := s.header.Get("Authorization"); got != "Bearer key-"+arm {
				t.Fatalf("%s's engine got Authorization %q", arm, got)
			}
		}
		run, ok, err := ReadRun(runDir(filepath.Join(c.Out, "arms", arm), "smoke", 1))
		if err != nil || !ok || run.Meta.URL != st.targets[arm].URL || run.Stats.OK != run.Stats.Requests {
			t.Errorf("%s run.json: %v %v %+v", arm, ok, err, run.Meta)
		}
		for _, f := range []string{"versions.txt", "engines-after.txt", "arm.json"} {
			if _, err := os.Stat(filepath.Join(c.Out, "arms", arm, f)); err != nil {
				t.Errorf("%s: %v", arm, err)
			}
		}
	}
	// Up got the arm's own copy of its lb config, by an absolute path.
	if p := st.lbConfigs["p2"]; !filepath.IsAbs(p) || !strings.HasSuffix(p, filepath.Join("arms", "p2", "lb-config.json")) {
		t.Errorf("p2's Up saw lb config %q", p)
	}
	if p := st.lbConfigs["ww"]; p != "" {
		t.Errorf("ww has no lb config, its Up saw %q", p)
	}
	// The template is left alone for the next campaign.
	if c.Template.Client.BaseURL != "" || c.Template.Client.APIKey != "template-key" {
		t.Errorf("template changed: %+v", c.Template.Client)
	}
}

func TestCampaignStackDownAfterAFailingRun(t *testing.T) {
	st := &fakeStack{targets: map[string]ArmTarget{}, up: func(_ Arm, armDir string) error {
		// A file where the run's folder goes makes writing its results fail.
		return os.WriteFile(filepath.Join(armDir, "smoke"), nil, 0o600)
	}}
	c := stackCampaign(t, st, func(context.Context, *Job) Result { return Result{Status: 200} })
	_, err := c.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "arm p2: smoke r1") {
		t.Fatalf("err = %v, want p2's run named", err)
	}
	if got, want := st.calls(), []string{"up p2", "down p2"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v (the campaign stops at the failing arm)", got, want)
	}
}

func TestCampaignStackDownAfterAFailedUp(t *testing.T) {
	st := &fakeStack{up: func(Arm, string) error { return errors.New("hub did not start") }, downErr: errors.New("engine gone")}
	c := stackCampaign(t, st, func(context.Context, *Job) Result { t.Error("sent"); return Result{} })
	_, err := c.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "starting the stack: hub did not start") {
		t.Fatalf("err = %v", err)
	}
	if got, want := st.calls(), []string{"up p2", "down p2"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

func TestCampaignStackDownErrorFailsTheArm(t *testing.T) {
	st := &fakeStack{targets: map[string]ArmTarget{}, downErr: errors.New("engine gone")}
	c := stackCampaign(t, st, func(context.Context, *Job) Result { return Result{Status: 200} })
	_, err := c.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), "arm p2: stopping the stack: engine gone") {
		t.Fatalf("err = %v", err)
	}
}

func TestCampaignStackDownAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	st := &fakeStack{targets: map[string]ArmTarget{}}
	var once sync.Once
	c := stackCampaign(t, st, func(rctx context.Context, _ *Job) Result {
		once.Do(cancel) // Ctrl-C during the first arm's run
		<-rctx.Done()
		return Result{Err: context.Cause(rctx).Error()}
	})
	_, err := c.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err = %v, want the run interrupted", err)
	}
	if got, want := st.calls(), []string{"up p2", "down p2"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
	// Down got a live context of its own, with a deadline.
	if got := st.downCtx; len(got) != 1 || got[0] != "err=<nil> deadline=true" {
		t.Errorf("Down's context: %v", got)
	}
}

func TestCampaignResumeSkipsTheStack(t *testing.T) {
	st := &fakeStack{targets: map[string]ArmTarget{}}
	c := stackCampaign(t, st, func(context.Context, *Job) Result { return Result{Status: 200, Usage: true, PromptTokens: 1} })
	if _, err := c.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.Resume = true
	before := len(st.calls())
	if _, err := c.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := st.calls()[before:]; len(got) != 0 {
		t.Fatalf("resume of a complete campaign called %v", got)
	}
	// An incomplete arm starts its stack again, alone.
	_ = os.Remove(filepath.Join(runDir(filepath.Join(c.Out, "arms", "ww"), "smoke", 1), RunFile))
	if _, err := c.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := st.calls()[before:], []string{"up ww", "down ww"}; !slices.Equal(got, want) {
		t.Fatalf("calls %v, want %v", got, want)
	}
}

func TestCampaignStackExcludesHooks(t *testing.T) {
	for _, hooks := range [][2]string{{"true", ""}, {"", "true"}} {
		st := &fakeStack{}
		c := stackCampaign(t, st, nil)
		c.BeforeArm, c.AfterArm = hooks[0], hooks[1]
		_, err := c.Run(t.Context())
		if !errors.Is(err, ErrStackAndHooks) || !strings.Contains(err.Error(), "--before-arm") || !strings.Contains(err.Error(), "--after-arm") {
			t.Errorf("hooks %q: err = %v, want ErrStackAndHooks naming both flags", hooks, err)
		}
		if len(st.calls()) != 0 {
			t.Errorf("hooks %q: the stack was started", hooks)
		}
		if _, err := os.Stat(c.Out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("hooks %q: the campaign wrote %s", hooks, c.Out)
		}
	}
	if err := (&Campaign{Stack: &fakeStack{}}).Validate(); err != nil {
		t.Errorf("a stack alone: %v", err)
	}
}
