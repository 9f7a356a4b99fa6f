package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/stargate-router/stargate/gateway/internal/metrics"
	"github.com/stargate-router/stargate/pkg/clock"
)

// Window is the length of a limit window: limits are per minute.
const Window = time.Minute

// KeyTTL is how long a window's counter lives after its creation: the
// window and the next, so a settle that arrives after the window ended
// still finds its key.
const KeyTTL = 2 * Window

// Limits are one (API key, model)'s limits; 0 means unlimited.
type Limits struct {
	RequestsPerMinute int64
	TokensPerMinute   int64
}

// Config tunes a Limiter.
type Config struct {
	// FailOpen admits when the store fails (the default in main).
	FailOpen bool
	// StoreTimeout bounds each counter call; 0 sets no bound, for a
	// counter that never waits on I/O (Local), whose adds would spend
	// most of their time on the bound's context and timer.
	StoreTimeout time.Duration
	// Synced, when set, admits from local state reconciled with the
	// counter in the background (the local mode); nil sends every add to
	// the counter (the exact mode).
	Synced *Synced
}

// Limiter admits and settles requests. Safe for concurrent use.
type Limiter struct {
	counter Counter
	cfg     Config
	clock   clock.Clock
	m       *metrics.Metrics
	log     *slog.Logger
	keys    keyCache
}

// New returns a limiter over counter.
func New(counter Counter, cfg Config, clk clock.Clock, m *metrics.Metrics, log *slog.Logger) *Limiter {
	return &Limiter{counter: counter, cfg: cfg, clock: clk, m: m, log: log}
}

// maxCachedKeys bounds the key cache: (principal, model) pairs of one
// window. Principals are configured keys, but the model is the client's
// string, so a client naming many models must not grow the cache; past
// the bound keys are built per request, as without the cache.
const maxCachedKeys = 4096

// keyCache holds the counter keys of the current window, so that a
// request does not hash its principal and model and build two key
// strings (a SHA-256 and half a dozen allocations each) that an earlier
// request of the same caller already built. It is emptied when the
// window changes.
type keyCache struct {
	mu     sync.Mutex
	window int64
	keys   map[keyID]*dimKeys
}

// keyID names one caller's counters in a window.
type keyID struct{ principal, model string }

// dimKeys are one caller's counter keys, each built on first use.
type dimKeys struct{ requests, tokens string }

// cachedKey returns the key of dim ("requests" or "tokens") for principal
// and model in window, from the cache when an earlier request built it.
func (l *Limiter) cachedKey(principal, model, dim string, window int64) string {
	c := &l.keys
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil || c.window != window {
		c.keys, c.window = make(map[keyID]*dimKeys), window
	}
	id := keyID{principal, model}
	k := c.keys[id]
	if k == nil {
		if len(c.keys) >= maxCachedKeys {
			return l.key(principal, model, dim, window)
		}
		k = &dimKeys{}
		c.keys[id] = k
	}
	p := &k.requests
	if dim == dimTokens {
		p = &k.tokens
	}
	if *p == "" {
		*p = l.key(principal, model, dim, window)
	}
	return *p
}

// The dimension names in counter keys.
const (
	dimRequests = "requests"
	dimTokens   = "tokens"
)

// Decision is the outcome of Reserve, with what the x-ratelimit-* headers
// report.
type Decision struct {
	// Allowed is false for a 429.
	Allowed bool
	// Err is a store failure under fail-closed: the caller answers 503.
	Err error
	// RetryAfter is the time until the window that refused resets.
	RetryAfter time.Duration
	// Requests and Tokens describe each limited dimension.
	Requests, Tokens *Dim
}

// Dim is one dimension's header values.
type Dim struct {
	Limit, Remaining int64
	Reset            time.Duration
}

// Reservation is an admitted request's hold on the token counter.
type Reservation struct {
	l        *Limiter
	key      string
	window   int64
	reserved int64
	once     sync.Once
}

func (l *Limiter) key(principal, model, dim string, window int64) string {
	h := sha256.New()
	h.Write([]byte(principal))
	h.Write([]byte{0})
	h.Write([]byte(model))
	return "rl:v1:" + hex.EncodeToString(h.Sum(nil)[:16]) + ":" + dim + ":" + strconv.FormatInt(window, 10)
}

// storeAdd adds delta to key on c under timeout (none when 0), counting a
// failure by op.
func storeAdd(ctx context.Context, c Counter, timeout time.Duration, m *metrics.Metrics, op, key string, delta int64) (int64, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	v, err := c.Add(ctx, key, delta, KeyTTL)
	if err != nil {
		kind := "error"
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			kind = "timeout"
		}
		m.RateLimitErrors.WithLabelValues(op, kind).Inc()
	}
	return v, err
}

// take adds delta to key and reports the counter's value after the add
// and whether it is within limit; a refused add is taken back.
func (l *Limiter) take(ctx context.Context, key string, delta, limit int64) (int64, bool, error) {
	if l.cfg.Synced != nil {
		return l.cfg.Synced.take(ctx, key, delta, limit)
	}
	v, err := storeAdd(ctx, l.counter, l.cfg.StoreTimeout, l.m, "reserve", key, delta)
	if err != nil {
		return 0, false, err
	}
	if v > limit {
		l.adjust(ctx, "reserve", key, -delta)
		return v, false, nil
	}
	return v, true, nil
}

// adjust adds delta to key without a decision (take-backs, settlements),
// ignoring the caller's cancellation.
func (l *Limiter) adjust(ctx context.Context, op, key string, delta int64) {
	if l.cfg.Synced != nil {
		l.cfg.Synced.adjust(key, delta)
		return
	}
	_, _ = storeAdd(context.WithoutCancel(ctx), l.counter, l.cfg.StoreTimeout, l.m, op, key, delta)
}

// Reserve admits one request of tokens (input estimate plus output
// maximum) for principal and model. A nil Reservation means there is
// nothing to settle.
func (l *Limiter) Reserve(ctx context.Context, principal, model string, lim Limits, tokens int64) (*Reservation, Decision) {
	if lim.RequestsPerMinute <= 0 && lim.TokensPerMinute <= 0 {
		return nil, Decision{Allowed: true}
	}
	now := l.clock.Now()
	window := now.UnixMilli() / Window.Milliseconds()
	reset := time.Duration((window+1)*Window.Milliseconds()-now.UnixMilli()) * time.Millisecond
	var d Decision
	d.Allowed = true
	var reqKey string
	if lim.RequestsPerMinute > 0 {
		reqKey = l.cachedKey(principal, model, dimRequests, window)
		v, ok, err := l.take(ctx, reqKey, 1, lim.RequestsPerMinute)
		if err != nil {
			return nil, l.storeFailed(err)
		}
		d.Requests = &Dim{Limit: lim.RequestsPerMinute, Remaining: max(lim.RequestsPerMinute-v, 0), Reset: reset}
		if !ok {
			l.m.RateLimitDecision.WithLabelValues("limited", "requests").Inc()
			return nil, Decision{Allowed: false, RetryAfter: reset, Requests: d.Requests}
		}
	}
	var res *Reservation
	if lim.TokensPerMinute > 0 {
		tokKey := l.cachedKey(principal, model, dimTokens, window)
		v, ok, err := l.take(ctx, tokKey, tokens, lim.TokensPerMinute)
		if err != nil {
			if reqKey != "" {
				l.adjust(ctx, "reserve", reqKey, -1)
			}
			return nil, l.storeFailed(err)
		}
		d.Tokens = &Dim{Limit: lim.TokensPerMinute, Remaining: max(lim.TokensPerMinute-v, 0), Reset: reset}
		if !ok {
			if reqKey != "" {
				l.adjust(ctx, "reserve", reqKey, -1)
				// The refused request no longer counts.
				d.Requests.Remaining = min(d.Requests.Remaining+1, lim.RequestsPerMinute)
			}
			d.Tokens.Remaining = max(lim.TokensPerMinute-(v-tokens), 0)
			l.m.RateLimitDecision.WithLabelValues("limited", "tokens").Inc()
			return nil, Decision{Allowed: false, RetryAfter: reset, Requests: d.Requests, Tokens: d.Tokens}
		}
		res = &Reservation{l: l, key: tokKey, window: window, reserved: tokens}
	}
	l.m.RateLimitDecision.WithLabelValues("allowed", "none").Inc()
	return res, d
}

func (l *Limiter) storeFailed(err error) Decision {
	if l.cfg.FailOpen {
		l.m.RateLimitDecision.WithLabelValues("fail_open", "none").Inc()
		return Decision{Allowed: true}
	}
	l.m.RateLimitDecision.WithLabelValues("fail_closed", "none").Inc()
	return Decision{Err: err}
}

// Settle replaces the reservation by used tokens (the backend's reported
// usage, or the input estimate when none arrived). It runs once; later
// calls do nothing. A refund goes back to the reservation's window only
// while that window is current (an ended window admits nothing more); an
// overrun is charged to the current window, so the limit also absorbs
// underestimates. It never blocks longer than the store timeout and
// ignores the caller's cancellation (a client that hung up still used
// the tokens).
func (r *Reservation) Settle(ctx context.Context, used int64) {
	if r == nil {
		return
	}
	r.once.Do(func() {
		delta := used - r.reserved
		now := r.l.clock.Now().UnixMilli() / Window.Milliseconds()
		switch {
		case delta < 0 && now == r.window:
			r.l.adjust(ctx, "settle", r.key, delta)
		case delta > 0:
			key := r.key
			if now != r.window {
				key = r.key[:len(r.key)-len(strconv.FormatInt(r.window, 10))] + strconv.FormatInt(now, 10)
			}
			r.l.adjust(ctx, "settle", key, delta)
		}
	})
}
