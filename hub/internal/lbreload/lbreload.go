package lbreload

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stargate-router/stargate/hub/internal/lbconfig"
	"github.com/stargate-router/stargate/pkg/clock"
)

// Generation is one loaded lb-config: immutable, shared by every request
// that captured it.
type Generation struct {
	Config   *lbconfig.Config
	Resolver *lbconfig.Resolver
	// Hash is Hash of the file's bytes; "" for the built-in configuration
	// of a hub without --lb-config-path.
	Hash string
	// Path is the file it was read from, "" for the built-in one.
	Path string
	// LoadedAt is when it became active.
	LoadedAt time.Time
}

// Hash is the short content hash that names a configuration in metrics,
// /debug/state and the x-stargate-lb-config-hash header: the first 12 hex
// digits of the SHA-256 of the file's bytes, enough to tell apart any
// two versions an operator will ever roll out.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// Result is the outcome of one reload, the result label of
// lb_config_reloads_total.
type Result string

// The reload outcomes.
const (
	// Applied: new, valid content is now active.
	Applied Result = "applied"
	// Rejected: the file could not be read, or its content is invalid;
	// the previous configuration keeps serving.
	Rejected Result = "rejected"
	// Unchanged: the content is the active one's, or the one last
	// rejected; nothing was done.
	Unchanged Result = "unchanged"
)

var results = [...]Result{Applied, Rejected, Unchanged}

// Rejection describes the last rejected reload, for /debug/state.
type Rejection struct {
	At time.Time `json:"at"`
	// Hash is the rejected content's, "" when the file could not be read.
	Hash    string `json:"hash,omitempty"`
	Trigger string `json:"trigger"`
	Error   string `json:"error"`
}

// Options configure a Reloader.
type Options struct {
	// Path is --lb-config-path; "" serves the built-in permissive
	// configuration, and reloading does nothing.
	Path string
	// Factory builds pickers (lbfactory.New in the hub).
	Factory lbconfig.Factory
	// Resolver is the template of every generation's resolver options;
	// its Metrics and Registerer are set here.
	Resolver lbconfig.Options
	// Registerer receives the lb_config_* and resolver metrics; nil
	// records none.
	Registerer prometheus.Registerer
	// MetricsPrefix prefixes metric names; "" means "stargate_".
	MetricsPrefix string
	// OnApply receives every generation after the first, before it becomes
	// Current: the hub hands it to the proxy here. It must not block.
	OnApply func(*Generation)
	// Clock stamps LoadedAt and rejections; nil is the wall clock.
	Clock clock.Clock
	// Log reports reloads; nil discards.
	Log *slog.Logger
}

// Reloader holds the active generation. Build it with New; it is safe for
// concurrent use.
type Reloader struct {
	opts    Options
	metrics *lbconfig.Metrics
	current atomic.Pointer[Generation]

	// mu serialises reloads (a SIGHUP and a watch event may coincide) and
	// guards what they record.
	mu           sync.Mutex
	lastRejected *Rejection
	lastOK       bool
	reloads      *prometheus.CounterVec
}

// New loads the configuration at opts.Path (or the built-in one) and
// registers the metrics. An invalid file fails New: a hub does not start
// on a configuration it cannot serve.
func New(opts Options) (*Reloader, error) {
	if opts.Factory == nil {
		return nil, errors.New("lbreload: Factory is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.MetricsPrefix == "" {
		opts.MetricsPrefix = "stargate_"
	}
	m, err := lbconfig.NewMetrics(opts.Registerer, opts.MetricsPrefix)
	if err != nil {
		return nil, err
	}
	r := &Reloader{opts: opts, metrics: m, lastOK: true}
	r.opts.Resolver.Metrics, r.opts.Resolver.Registerer = m, nil
	var gen *Generation
	if opts.Path == "" {
		gen, err = r.build(lbconfig.Permissive(), "")
	} else {
		var data []byte
		if data, err = lbconfig.ReadFile(opts.Path); err != nil {
			return nil, err
		}
		var cfg *lbconfig.Config
		if cfg, err = lbconfig.ParseFile(opts.Path, data); err != nil {
			return nil, err
		}
		gen, err = r.build(cfg, Hash(data))
	}
	if err != nil {
		return nil, err
	}
	r.activate(gen)
	if err := r.registerMetrics(); err != nil {
		return nil, err
	}
	sum := gen.Config.Summary()
	r.opts.Log.Info("load balancer config loaded", "path", opts.Path, "hash", gen.Hash,
		"default_lb", sum.DefaultLB, "model_overrides", sum.ModelOverrides)
	return r, nil
}

// build validates cfg completely (every definition through the factory)
// and returns its generation.
func (r *Reloader) build(cfg *lbconfig.Config, hash string) (*Generation, error) {
	res, err := lbconfig.NewResolver(cfg, r.opts.Factory, r.opts.Resolver)
	if err != nil {
		return nil, err
	}
	path := r.opts.Path
	if hash == "" {
		path = ""
	}
	return &Generation{Config: cfg, Resolver: res, Hash: hash, Path: path, LoadedAt: r.opts.Clock.Now()}, nil
}

func (r *Reloader) activate(gen *Generation) {
	r.metrics.Track(gen.Resolver)
	r.current.Store(gen)
}

// Current returns the active generation.
func (r *Reloader) Current() *Generation { return r.current.Load() }

// Path is the configured file, "" when there is none to reload.
func (r *Reloader) Path() string { return r.opts.Path }

// Reload reads the file again and applies it if it is new and valid.
// trigger ("sighup", "watch") is logged and kept with a rejection. Without
// a file it does nothing and reports Unchanged, uncounted.
func (r *Reloader) Reload(trigger string) Result {
	if r.opts.Path == "" {
		r.opts.Log.Info("no --lb-config-path: nothing to reload", "trigger", trigger)
		return Unchanged
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.reloadLocked(trigger)
	r.reloads.WithLabelValues(string(res)).Inc()
	return res
}

func (r *Reloader) reloadLocked(trigger string) Result {
	path, log := r.opts.Path, r.opts.Log
	data, err := lbconfig.ReadFile(path)
	if err != nil {
		return r.reject(trigger, "", err)
	}
	hash, cur := Hash(data), r.current.Load()
	if hash == cur.Hash {
		log.Debug("lb config unchanged", "trigger", trigger, "hash", hash)
		r.lastOK = true
		return Unchanged
	}
	if rej := r.lastRejected; !r.lastOK && rej.Hash == hash {
		// The same invalid bytes again (a second event of one update, a
		// SIGHUP before the fix): nothing new to say or count as a
		// rejection.
		log.Info("lb config still holds the rejected content; the previous config keeps serving",
			"trigger", trigger, "hash", hash, "active_hash", cur.Hash)
		return Unchanged
	}
	cfg, err := lbconfig.ParseFile(path, data)
	if err != nil {
		return r.reject(trigger, hash, err)
	}
	gen, err := r.build(cfg, hash)
	if err != nil {
		return r.reject(trigger, hash, err)
	}
	if r.opts.OnApply != nil {
		r.opts.OnApply(gen)
	}
	r.activate(gen)
	r.lastOK = true
	sum := cfg.Summary()
	log.Info("lb config reloaded", "trigger", trigger, "path", path, "hash", hash, "previous_hash", cur.Hash,
		"default_lb", sum.DefaultLB, "model_overrides", sum.ModelOverrides)
	return Applied
}

// reject records and logs a rejected reload. The log names the place in
// the file and the field when lbconfig knows them.
func (r *Reloader) reject(trigger, hash string, err error) Result {
	r.lastRejected = &Rejection{At: r.opts.Clock.Now(), Hash: hash, Trigger: trigger, Error: err.Error()}
	r.lastOK = false
	attrs := []any{"trigger", trigger, "path", r.opts.Path, "hash", hash, "active_hash", r.current.Load().Hash, "err", err}
	var ce *lbconfig.ConfigError
	if errors.As(err, &ce) {
		attrs = append(attrs, "entry", ce.Path, "field", ce.Field, "algorithm", ce.Algorithm)
	}
	r.opts.Log.Error("lb config reload rejected; the previous config keeps serving", attrs...)
	return Rejected
}

// Status is the reload state /debug/state shows.
type Status struct {
	Path     string    `json:"path"`
	Hash     string    `json:"hash"`
	LoadedAt time.Time `json:"loaded_at"`
	// DefaultLB is the default algorithm; Models the configured algorithm
	// of each models entry.
	DefaultLB string            `json:"default_lb"`
	Models    map[string]string `json:"models"`
	// LastReloadOK is false while the latest reload was rejected.
	LastReloadOK bool `json:"last_reload_ok"`
	// LastRejected is the latest rejected reload, kept after later
	// successes; nil if none was ever rejected.
	LastRejected *Rejection `json:"last_rejected,omitempty"`
}

// Status returns the active configuration and the last rejection.
func (r *Reloader) Status() Status {
	gen := r.current.Load()
	r.mu.Lock()
	rej, ok := r.lastRejected, r.lastOK
	r.mu.Unlock()
	return Status{Path: gen.Path, Hash: gen.Hash, LoadedAt: gen.LoadedAt, DefaultLB: gen.Config.Summary().DefaultLB,
		Models: gen.Config.ModelAlgorithms(), LastReloadOK: ok, LastRejected: rej}
}
