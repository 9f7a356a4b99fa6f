package mockengine

import (
	"context"
	"maps"
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

	// fault is the engine-wide injected fault; faultSeen counts the
	// inference requests since it was set, which decides the ones a
	// fraction hits; faultsInjected counts the faults that took effect,
	// per mode, since the engine started.
	fault          faultSpec
	faultSeen      uint64
	faultsInjected map[faultMode]uint64
	// poison replaces the statistics the pylon reads; frozenKV is the
	// /kv-cache/stats body a stale poison keeps answering.
	poison   statsPoison
	frozenKV []byte
	// kvReads counts /kv-cache/stats answers, so a test can wait until
	// the pylon has polled a poison instead of sleeping for it.
	kvReads uint64
}

func newTestControl(model string) *testControl {
	return &testControl{
		discovered:     []string{model},
		models:         make(map[string]modelControl),
		counters:       make(map[counterKey]uint64),
		changed:        make(chan struct{}),
		fault:          faultSpec{Mode: faultNone},
		faultsInjected: map[faultMode]uint64{faultStatus: 0, faultHang: 0, faultDrop: 0},
		poison:         poisonNone,
	}
}

// setFault replaces the fault and restarts the count its fraction is
// applied to.
func (t *testControl) setFault(f faultSpec) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fault, t.faultSeen = f, 0
}

// nextFault is the fault for the inference request that calls it: the set
// fault when its fraction hits this request, else mode none.
func (t *testControl) nextFault() faultSpec {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fault.Mode == faultNone {
		return faultSpec{Mode: faultNone}
	}
	t.faultSeen++
	if !t.fault.hits(t.faultSeen) {
		return faultSpec{Mode: faultNone}
	}
	return t.fault
}

// injected counts a fault that took effect.
func (t *testControl) injected(m faultMode) {
	t.mu.Lock()
	t.faultsInjected[m]++
	t.mu.Unlock()
}

func (t *testControl) setPoison(p statsPoison, frozenKV []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.poison, t.frozenKV = p, frozenKV
}

// statsPoison returns the poison and, for a stale one, the frozen
// /kv-cache/stats body.
func (t *testControl) statsPoison() (statsPoison, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.poison, t.frozenKV
}

// kvRead counts a /kv-cache/stats answer and returns the poison it gets.
func (t *testControl) kvRead() (statsPoison, []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kvReads++
	return t.poison, t.frozenKV
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
	Fault                  faultSpec               `json:"fault"`
	FaultsInjected         map[faultMode]uint64    `json:"faults_injected"`
	StatsPoison            statsPoison             `json:"stats_poison"`
	KVStatsReads           uint64                  `json:"kv_stats_reads"`
}

func (t *testControl) snapshot() snapshotJSON {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshotJSON{
		DiscoveredModels:       slices.Clone(t.discovered),
		ModelDiscoveryRequests: t.discoveryRequests,
		Models:                 make(map[string]modelControl, len(t.models)),
		Counters:               make([]counterJSON, 0, len(t.counters)),
		Fault:                  t.fault,
		FaultsInjected:         maps.Clone(t.faultsInjected),
		StatsPoison:            t.poison,
		KVStatsReads:           t.kvReads,
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
