package mockengine

import (
	"context"
	"slices"
	"strings"
	"sync"
)

// Request classes of the test-control counters: traffic the pylon
// generates itself (calibration, canaries) and everything else. The label
// values are upstream Stargate's, which its tests and ours assert on.
const (
	classPylon   = "pylon_generated"
	classGateway = "api_gateway"
)

// modelControl is the failure injection for one model.
type modelControl struct {
	ChatFailure    bool `json:"chat_failure"`
	BringupBlocked bool `json:"bringup_blocked"`
}

type counterKey struct {
	endpoint, model, class string
}

// testControl holds the failure injection and request counters tests
// inspect and change through /test-control.
type testControl struct {
	mu                sync.Mutex
	discovered        []string
	discoveryRequests uint64
	models            map[string]modelControl
	counters          map[counterKey]uint64
	changed           chan struct{} // closed and replaced on every change
}

func newTestControl(model string) *testControl {
	return &testControl{
		discovered: []string{model},
		models:     make(map[string]modelControl),
		counters:   make(map[counterKey]uint64),
		changed:    make(chan struct{}),
	}
}

func requestClass(requestID string) string {
	if strings.HasPrefix(requestID, "calibration-") || strings.HasPrefix(requestID, "canary-") {
		return classPylon
	}
	return classGateway
}

func (t *testControl) count(endpoint, model, class string) {
	t.mu.Lock()
	t.counters[counterKey{endpoint, model, class}]++
	t.mu.Unlock()
}

func (t *testControl) model(name string) modelControl {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.models[name]
}

// waitBringup blocks a pylon-generated request while its model's bringup is
// blocked, returning false if ctx ends first.
func (t *testControl) waitBringup(ctx context.Context, model string) bool {
	for {
		t.mu.Lock()
		blocked := t.models[model].BringupBlocked
		ch := t.changed
		t.mu.Unlock()
		if !blocked {
			return true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// update applies a partial change to a model's controls.
func (t *testControl) update(model string, chatFailure, bringupBlocked *bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	mc := t.models[model]
	if chatFailure != nil {
		mc.ChatFailure = *chatFailure
	}
	if bringupBlocked != nil {
		mc.BringupBlocked = *bringupBlocked
	}
	t.models[model] = mc
	close(t.changed)
	t.changed = make(chan struct{})
}

func (t *testControl) setDiscovered(models []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.discovered = slices.Clone(models)
}

// discover returns the /v1/models set and counts the request.
func (t *testControl) discover() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.discoveryRequests++
	return slices.Clone(t.discovered)
}

type counterJSON struct {
	Endpoint     string `json:"endpoint"`
	Model        string `json:"model"`
	RequestClass string `json:"request_class"`
	Count        uint64 `json:"count"`
}

type snapshotJSON struct {
	DiscoveredModels       []string                `json:"discovered_models"`
	ModelDiscoveryRequests uint64                  `json:"model_discovery_requests"`
	Models                 map[string]modelControl `json:"models"`
	Counters               []counterJSON           `json:"counters"`
}

func (t *testControl) snapshot() snapshotJSON {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshotJSON{
		DiscoveredModels:       slices.Clone(t.discovered),
		ModelDiscoveryRequests: t.discoveryRequests,
		Models:                 make(map[string]modelControl, len(t.models)),
		Counters:               make([]counterJSON, 0, len(t.counters)),
	}
	for k, v := range t.models {
		s.Models[k] = v
	}
	for k, v := range t.counters {
		s.Counters = append(s.Counters, counterJSON{Endpoint: k.endpoint, Model: k.model, RequestClass: k.class, Count: v})
	}
	slices.SortFunc(s.Counters, func(a, b counterJSON) int {
		return strings.Compare(a.Endpoint+"\x00"+a.Model+"\x00"+a.RequestClass, b.Endpoint+"\x00"+b.Model+"\x00"+b.RequestClass)
	})
	return s
}
