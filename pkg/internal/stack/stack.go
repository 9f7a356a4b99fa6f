package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// Binaries returns the programs Start runs, by their names in
// Options.BinDir.
func Binaries() []string { return []string{"hub", "gateway", "pylon", "mock-engine"} }

// MissingBinaries lists the Binaries that binDir lacks (or holds as
// something that is not an executable file), so a caller can say so before
// it starts anything.
func MissingBinaries(binDir string) []string {
	var out []string
	for _, b := range Binaries() {
		if !executable(binDir, b) {
			out = append(out, b)
		}
	}
	return out
}

// executable reports whether dir holds name as an executable regular file.
func executable(dir, name string) bool {
	fi, err := os.Stat(filepath.Join(dir, name))
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// Options say what Start runs and where its files go.
type Options struct {
	// BinDir holds the built Binaries (`make build` writes them to ./bin).
	BinDir string
	// LogDir receives one <child>.log per process (created if missing);
	// a log is appended to, so a restart in the same folder keeps the
	// earlier run's lines.
	LogDir string
	// SecretDir receives the credentials the children share (tokens and
	// the gateway's API key file). Empty: a private temporary folder that
	// Stop removes. Credentials never go on a command line.
	SecretDir string
	// Fleet is what to run: DemoFleet, BenchFleet or one of the caller's.
	Fleet Fleet
	// LBConfigPath is the hub's lb-config.json; empty starts the hub
	// without one, which allows every algorithm with default settings.
	LBConfigPath string
	// Principal names the gateway's one API key ("sk-<principal>-…"), the
	// name its logs and rate limits show; empty means "stack".
	Principal string
	// Hubs is how many hub replicas run (0 means 1): "hub", then "hub-2",
	// "hub-3", ... Every pylon keeps a tunnel to each (--stargate-address
	// lists them all) and every gateway spreads its requests over them
	// (--hub-url lists them all), as with a headless Service.
	Hubs int
	// Gateways is how many gateways run (0 means 1). With more than one,
	// their embedded Olric nodes form one cluster on loopback, gossip
	// encrypted and the data port authenticated with a shared secret
	// written beside the other credentials, so every replica sees the
	// hints and counters another wrote.
	Gateways int
	// ExtraArgs are more command-line flags for some children, keyed by
	// binary ("hub", "gateway", "pylon", "mock-engine") or by child name
	// ("pylon-near-a", "gateway-2"); a binary's come first. They follow the
	// stack's own flags, so a repeated flag overrides the stack's value.
	ExtraArgs map[string][]string
	// FloorHops is how many relay-floor hops (bin/baseline-proxy, a bare
	// reverse proxy) to chain in front of the fleet's first engine:
	// "floor-1" calls the engine, "floor-2" calls floor-1, and so on. A
	// benchmark reads the tiers' cost against them, what any Go HTTP hop
	// costs on the same machine. 0 (the default) runs none and needs no
	// baseline-proxy binary.
	FloorHops int
}

// Endpoints are the URLs and credentials of a running stack.
type Endpoints struct {
	// Gateway is the gateway's base URL (the OpenAI API is under /v1).
	Gateway, GatewayMetrics string
	// Gateways and GatewaysMetrics are every gateway's, Gateway first
	// (Options.Gateways).
	Gateways, GatewaysMetrics []string
	// Hub is the hub's base URL; HubMetrics its /metrics; HubState its
	// /debug/state, on the admin listener beside /metrics. With several
	// hubs they are the first one's.
	Hub, HubMetrics, HubState string
	// Hubs, HubsMetrics and HubsState are every hub's, in the order of
	// HubNames (Options.Hubs).
	Hubs, HubsMetrics, HubsState []string
	// HubNames are the hubs' child names, for Kill, Terminate and Restart.
	HubNames []string
	// PylonMetrics are the pylons' /metrics URLs by pylon name (Fleet.Pylons:
	// the cluster id when a cluster has one pylon).
	PylonMetrics map[string]string
	// Engines are the mock engines' base URLs by engine id (Fleet.EngineIDs:
	// the cluster id when a cluster has one engine).
	Engines map[string]string
	// APIKey is the one key the gateway accepts; APIKeysFile holds it.
	APIKey, APIKeysFile string
	// GatewayToken is what the gateway presents to the hub. A client
	// that talks to the hub directly sends it too (Authorization: Bearer)
	// so the hub trusts its routing headers, as it trusts the gateway's.
	GatewayToken string
	// FloorHops are the relay-floor hops' base URLs (Options.FloorHops):
	// FloorHops[i] reaches the first engine through i+1 hops.
	FloorHops []string
}

// Stack is a running fleet. Its methods may be called from one goroutine
// at a time; Stop may be called more than once.
type Stack struct {
	fleet     Fleet
	opts      Options
	l         *launcher
	http      *http.Client
	ep        Endpoints
	secretDir string
	// ownSecrets says Stop removes secretDir (Start created it).
	ownSecrets bool
	stopOnce   sync.Once
	// gossipMu guards gossip: each gateway's memberlist address by child
	// name, read by the gateways' environment when they (re)start.
	gossipMu sync.Mutex
	gossip   map[string]string
}

// Start writes fresh credentials, starts the fleet's engines and the hub,
// then the pylons and the gateway, and returns once the hub can route the
// model to every cluster. On error (ctx cancelled included) it has already
// stopped whatever it started.
func Start(ctx context.Context, o Options) (*Stack, error) {
	if len(o.Fleet.ClusterIDs()) == 0 {
		return nil, errors.New("stack: the fleet has no cluster")
	}
	missing := MissingBinaries(o.BinDir)
	if o.FloorHops > 0 && !executable(o.BinDir, floorBinary) {
		missing = append(missing, floorBinary)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("stack: %s lacks %v: run `make build` first", o.BinDir, missing)
	}
	if err := os.MkdirAll(o.LogDir, 0o750); err != nil {
		return nil, err
	}
	if o.Principal == "" {
		o.Principal = "stack"
	}
	s := &Stack{fleet: o.Fleet, opts: o, secretDir: o.SecretDir, gossip: map[string]string{}}
	if s.secretDir == "" {
		dir, err := os.MkdirTemp("", "stargate-"+o.Principal+"-")
		if err != nil {
			return nil, err
		}
		s.secretDir, s.ownSecrets = dir, true
	}
	// A client of its own: Stop closes its idle connections, so no
	// keep-alive goroutine outlives the stack.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	s.http = &http.Client{Transport: tr}
	s.l = newLauncher(o.BinDir, o.LogDir, s.http)
	if err := s.start(ctx, o.LBConfigPath, o.Principal); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// start is Start once the stack exists, so Start can stop it on error.
func (s *Stack) start(ctx context.Context, lbPath, principal string) error {
	f := s.fleet
	sec, apiKey, gwToken, err := writeSecrets(s.secretDir, principal)
	if err != nil {
		return err
	}
	var svcs []service
	for i := range s.hubCount() {
		name := hubName(i)
		svcs = append(svcs, service{name: name, binary: "hub", ports: 3,
			args:  s.extra(name, "hub", func(p []int) []string { return hubArgs(hubPorts{p[0], p[1], p[2]}, lbPath, sec) }),
			ready: func(p []int) string { return "http://" + addr(p[0]) + "/readyz" }})
	}
	nHubs := len(svcs)
	pylons := f.Pylons()
	for _, py := range pylons {
		for _, id := range py.Engines {
			svcs = append(svcs, service{name: "engine-" + id, binary: "mock-engine", ports: 1,
				args:  s.extra("engine-"+id, "mock-engine", func(p []int) []string { return mockArgs(f, py, id, p[0]) }),
				ready: func(p []int) string { return "http://" + addr(p[0]) + "/health" }})
		}
	}
	ports, err := s.l.startAll(ctx, svcs...)
	if err != nil {
		return err
	}
	ep := Endpoints{PylonMetrics: map[string]string{}, Engines: map[string]string{},
		APIKey: apiKey, APIKeysFile: sec.apiKeys, GatewayToken: gwToken}
	var hubs hubSet
	for i := range nHubs {
		h := hubPorts{ports[i][0], ports[i][1], ports[i][2]}
		hubs = append(hubs, h)
		ep.HubNames = append(ep.HubNames, hubName(i))
		ep.Hubs = append(ep.Hubs, "http://"+addr(h.api))
		ep.HubsMetrics = append(ep.HubsMetrics, "http://"+addr(h.metrics)+"/metrics")
		ep.HubsState = append(ep.HubsState, "http://"+addr(h.metrics)+"/debug/state")
	}
	ep.Hub, ep.HubMetrics, ep.HubState = ep.Hubs[0], ep.HubsMetrics[0], ep.HubsState[0]
	enginePorts := make([][]int, len(pylons))
	next := nHubs
	for i, py := range pylons {
		for _, id := range py.Engines {
			ep.Engines[id] = "http://" + addr(ports[next][0])
			enginePorts[i] = append(enginePorts[i], ports[next][0])
			next++
		}
	}

	// The pylons dial the hub and the gateway calls it, so they start
	// second. The gateway is ready once its Olric node has formed its
	// (one-member) cluster.
	olricSecret, err := s.olricSecret()
	if err != nil {
		return err
	}
	svcs = []service{s.gatewayService("gateway", hubs, sec, olricSecret)}
	for i, py := range pylons {
		svcs = append(svcs, service{name: "pylon-" + py.Name, binary: "pylon", ports: 2,
			args: s.extra("pylon-"+py.Name, "pylon", func(p []int) []string {
				return pylonArgs(f, py, hubs, enginePorts[i], p[0], p[1], sec)
			}),
			ready: func(p []int) string { return "http://" + addr(p[0]) + "/readyz" }})
	}
	ports, err = s.l.startAll(ctx, svcs...)
	if err != nil {
		return err
	}
	s.addGateway(&ep, "gateway", ports[0])
	for i, py := range pylons {
		ep.PylonMetrics[py.Name] = "http://" + addr(ports[i+1][1]) + "/metrics"
	}
	if err := s.startMoreGateways(ctx, &ep, hubs, sec, olricSecret); err != nil {
		return err
	}
	if err := s.startFloorHops(ctx, &ep); err != nil {
		return err
	}
	s.ep = ep
	return s.waitRoutable(ctx)
}

// Endpoints returns the running stack's URLs and credentials.
func (s *Stack) Endpoints() Endpoints {
	ep := s.ep
	ep.PylonMetrics, ep.Engines = maps.Clone(ep.PylonMetrics), maps.Clone(ep.Engines)
	ep.Gateways, ep.GatewaysMetrics = slices.Clone(ep.Gateways), slices.Clone(ep.GatewaysMetrics)
	ep.Hubs, ep.HubsMetrics, ep.HubsState = slices.Clone(ep.Hubs), slices.Clone(ep.HubsMetrics), slices.Clone(ep.HubsState)
	ep.HubNames, ep.FloorHops = slices.Clone(ep.HubNames), slices.Clone(ep.FloorHops)
	return ep
}

// Stop stops every process the stack started, the gateway and pylons
// before the hub, and returns once all have exited (SIGKILL after a grace
// period), then removes the credentials it created. Later calls do
// nothing.
func (s *Stack) Stop() {
	s.stopOnce.Do(func() {
		s.l.stop()
		if s.ownSecrets {
			_ = os.RemoveAll(s.secretDir)
		}
	})
}

// waitRoutable polls the hub's /debug/state until every cluster of the
// fleet is routable for the model: registered with an input TPS (pulsar
// ranks only weighted clusters) and a measured RTT (the hub routes to no
// cluster before its first /health probe).
func (s *Stack) waitRoutable(ctx context.Context) error {
	return s.WaitRoutable(ctx, s.fleet.ClusterIDs())
}

// WaitRoutable polls every running hub's /debug/state until each cluster
// of want is routable for the fleet's model there, as Start does, for at
// most the launcher's settle time: after a hub or pylon restart it says
// the pylons are back. A hub that was killed and not restarted is left
// out.
func (s *Stack) WaitRoutable(ctx context.Context, want []string) error {
	for i, name := range s.ep.HubNames {
		if !s.Running(name) {
			continue
		}
		if err := s.waitRoutableOn(ctx, s.ep.HubsState[i], want); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// waitRoutableOn is WaitRoutable for the hub whose /debug/state is url.
func (s *Stack) waitRoutableOn(ctx context.Context, url string, want []string) error {
	missing := want
	err := poll(ctx, nil, func() (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := s.http.Do(req)
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		var st debugState
		if json.NewDecoder(resp.Body).Decode(&st) != nil {
			return false, nil
		}
		missing = st.unroutable(s.fleet.Model, want)
		return len(missing) == 0, nil
	}, "the hub did not see every cluster routable")
	if err != nil {
		return fmt.Errorf("%w (still waiting for %v)", err, missing)
	}
	return nil
}

// debugState is the part of the hub's /debug/state the stack reads.
type debugState struct {
	Routing struct {
		Targets []struct {
			Model    string `json:"model"`
			Clusters []struct {
				ClusterID string `json:"cluster_id"`
				RTTNanos  int64  `json:"rtt_ns"`
				Stats     struct {
					MaxInputTPS      float64 `json:"max_input_tps"`
					LastMeanInputTPS float64 `json:"last_mean_input_tps"`
				} `json:"stats"`
			} `json:"clusters"`
		} `json:"targets"`
	} `json:"routing"`
}

// unroutable lists the clusters of want that model cannot be routed to yet.
func (st *debugState) unroutable(model string, want []string) []string {
	ok := map[string]bool{}
	for _, t := range st.Routing.Targets {
		if t.Model != model {
			continue
		}
		for _, c := range t.Clusters {
			ok[c.ClusterID] = c.RTTNanos > 0 && (c.Stats.MaxInputTPS > 0 || c.Stats.LastMeanInputTPS > 0)
		}
	}
	var out []string
	for _, id := range want {
		if !ok[id] {
			out = append(out, id)
		}
	}
	return out
}

// writeSecrets writes fresh random credentials to private files in dir:
// the pylons' registration token, the gateway's token for the hub
// (returned too) and one gateway API key for principal (returned, for the
// load generator).
func writeSecrets(dir, principal string) (s secrets, apiKey, gatewayToken string, err error) {
	s = secrets{registration: filepath.Join(dir, "registration-token"), gateway: filepath.Join(dir, "gateway-token"),
		apiKeys: filepath.Join(dir, "api-keys")}
	apiKey, gatewayToken = "sk-"+principal+"-"+randomHex(), randomHex()
	for path, content := range map[string]string{
		s.registration: randomHex(), s.gateway: gatewayToken,
		s.apiKeys: apiKey + " " + principal, // the name is the principal in the gateway's logs and rate limits
	} {
		if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
			return s, "", "", err
		}
	}
	return s, apiKey, gatewayToken, nil
}

func randomHex() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}
