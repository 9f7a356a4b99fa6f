package lbconfig

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/lbconfig/expr"
)

// The rejection classes of x-routing-method
// (docs/load-balancing.md#error-classes). Each is the `code` of the 400 the
// hub answers, so clients can branch on it.
const (
	// ClassMalformed: the header breaks a syntax rule P1–P11 (package expr).
	ClassMalformed = "malformed_expression"
	// ClassUnknownMethod: the method is not an algorithm name or alias.
	ClassUnknownMethod = "unknown_method"
	// ClassUnavailable: the algorithm is not configured for this model.
	ClassUnavailable = "unavailable"
	// ClassUnknownParameter: the key is not an expression parameter at all
	// (including last_cluster_affinity, returning_prefers_last_cluster,
	// rendezvous_weight, rtt_tier_ms, prefix_affinity, split_guard,
	// queue_on_saturated_holders and prefill_aware, which only a file may
	// set).
	ClassUnknownParameter = "unknown_parameter"
	// ClassNotApplicable: the key is a parameter, but not of this
	// algorithm.
	ClassNotApplicable = "not_applicable"
	// ClassInvalidValue: wrong type, out of range, or an unknown enum name.
	ClassInvalidValue = "invalid_value"
	// ClassInertValue: a value the spec requires to be positive is zero
	// (or, for max_input_work_seconds, not positive). In a file those values
	// are normalised silently or switch the feature off; in a per-request
	// expression they are almost certainly a mistake, so they are refused.
	ClassInertValue = "inert_value"
	// ClassInertCombination: the expression sets one queue-SLO bound and
	// the other is unset after the overlay, so the SLO would stay off.
	ClassInertCombination = "inert_combination"
)

// Rejection is why a routing header was refused: a class above and a
// message for the client. It is lb.Rejection, the type lb.Resolver
// returns, so the proxy reads it without importing this package.
type Rejection = lb.Rejection

func reject(class, format string, args ...any) *Rejection {
	return &Rejection{Class: class, Message: fmt.Sprintf(format, args...)}
}

// exprParams is where each expression parameter applies
// (docs/load-balancing.md#parameters-and-where-they-apply). A key
// missing here is unknown_parameter. It differs from the file's field table
// on purpose: cache_affinity_virtual_nodes is W&W-only (P-W&W ignores it),
// comparator is refused on P-W&W up front, and none of
// last_cluster_affinity, returning_prefers_last_cluster, rendezvous_weight,
// rtt_tier_ms, prefix_affinity, split_guard, queue_on_saturated_holders and
// prefill_aware may be chosen per request:
// the session rules, the key placement and where a prompt's prefix gets
// its copies (the holders every later request is routed to) are the
// operator's, and two requests of one session must not be routed by
// different ones.
var exprParams = map[string]algSet{
	"require_cache_affinity_key":             allAlgorithms,
	"require_input_tokens":                   allAlgorithms,
	"max_input_work_seconds":                 allAlgorithms,
	"sample_count":                           setOf(PowerOfN),
	"comparator":                             setOf(PowerOfN, WaitAndWiden, PrefixAffinity),
	"seed":                                   setOf(Pulsar, WaitAndWiden, PulsarWaitAndWiden),
	"consider_kv_free_tokens":                pulSet,
	"n":                                      wwSet,
	"max_queued":                             wwSet,
	"max_queue_time_floor_ms":                wwSet,
	"max_queue_time_ceil_ms":                 wwSet,
	"ttft_bucket_size_ms":                    wwSet,
	"next_bucket_unlock_factor":              wwSet,
	"ignore_queue_time":                      wwSet,
	"ignore_input_processing_time":           wwSet,
	"cache_affinity_backend_selection_count": wwSet,
	"cache_affinity_input_tokens_scale":      wwSet,
	"cache_affinity_wait_ms":                 wwSet,
	"cache_affinity_virtual_nodes":           setOf(WaitAndWiden),
	"band_widen_interval_ms":                 setOf(PulsarWaitAndWiden),
	"fallback_max_queued":                    setOf(PulsarWaitAndWiden),
}

// maxExprVirtualNodes bounds cache_affinity_virtual_nodes per request: the
// ring allocates candidates × nodes, and unlike the file an expression is
// not trusted.
const maxExprVirtualNodes = 1024

// Compile compiles the routing expression raw for model
// (docs/load-balancing.md#compilation): parse, resolve the method like a
// plain x-routing-method value, copy the resolved definition's
// settings, overlay each parameter and validate. The result is a new
// definition (its own identity). raw must carry at least the method; a
// method-only value compiles to a copy of the resolved definition.
func (c *Config) Compile(model, raw string) (*Definition, *Rejection) {
	e, err := expr.Parse(raw)
	if err != nil {
		return nil, &Rejection{Class: ClassMalformed, Message: err.Error()}
	}
	alg, ok := ParseMethod(e.Method)
	if !ok {
		return nil, reject(ClassUnknownMethod, "unknown routing method %q", clip(e.Method))
	}
	base, ok := c.Resolve(model, alg)
	if !ok {
		return nil, reject(ClassUnavailable, "routing method %s is not configured for model %q", alg, model)
	}
	return overlay(base, e.Params)
}

func overlay(base *Definition, params []expr.Param) (*Definition, *Rejection) {
	alg := base.alg
	s := base.settings // pointers are shared, never written through: each set replaces one
	queueBound := false
	for _, p := range params {
		algs, known := exprParams[p.Key]
		if !known {
			return nil, reject(ClassUnknownParameter, "unknown parameter %q for algorithm %s", clip(p.Key), alg)
		}
		if !algs.has(alg) {
			return nil, reject(ClassNotApplicable, "%s is not applicable to %s", p.Key, alg)
		}
		v := param{p}
		var r *Rejection
		switch p.Key {
		case "require_cache_affinity_key":
			s.RequireCacheAffinityKey, r = v.boolean()
		case "require_input_tokens":
			s.RequireInputTokens, r = v.boolean()
		case "consider_kv_free_tokens":
			s.ConsiderKVFreeTokens, r = v.boolean()
		case "ignore_queue_time":
			s.IgnoreQueueTime, r = v.boolean()
		case "ignore_input_processing_time":
			s.IgnoreInputProcessingTime, r = v.boolean()
		case "max_input_work_seconds":
			var f *float64
			if f, r = v.decimal(); r == nil && *f <= 0 {
				r = reject(ClassInertValue, "max_input_work_seconds must be positive")
			}
			s.MaxInputWorkSeconds = f
		case "sample_count":
			var u *uint64
			if u, r = v.unsigned(); r == nil && (*u < 1 || *u > MaxSampleCount) {
				r = v.invalid("must be between 1 and %d", MaxSampleCount)
			}
			s.SampleCount = u
		case "comparator":
			s.Comparator, r = v.comparator()
		case "seed":
			var t string
			if t, r = v.text(); r == nil {
				s.Seed = &t
			}
		case "n":
			s.N, r = v.positive(maxCount)
		case "ttft_bucket_size_ms":
			s.TTFTBucketSizeMs, r = v.positive(uint64(maxMillis))
		case "cache_affinity_backend_selection_count":
			s.CacheAffinityBackendSelectionCount, r = v.positive(maxCount)
		case "cache_affinity_virtual_nodes":
			s.CacheAffinityVirtualNodes, r = v.positive(maxExprVirtualNodes)
		case "max_queued":
			s.MaxQueued, r = v.unsigned()
		case "fallback_max_queued":
			s.FallbackMaxQueued, r = v.unsigned()
		case "max_queue_time_floor_ms":
			s.MaxQueueTimeFloorMs, r = v.millis()
			queueBound = true
		case "max_queue_time_ceil_ms":
			s.MaxQueueTimeCeilMs, r = v.millis()
			queueBound = true
		case "cache_affinity_wait_ms":
			s.CacheAffinityWaitMs, r = v.millis()
		case "band_widen_interval_ms":
			s.BandWidenIntervalMs, r = v.millis()
		case "next_bucket_unlock_factor":
			s.NextBucketUnlockFactor, r = v.decimal()
		case "cache_affinity_input_tokens_scale":
			var f *float64
			if f, r = v.decimal(); r == nil && (*f < 0 || *f > 1) {
				r = v.invalid("must be between 0.0 and 1.0")
			}
			s.CacheAffinityInputTokensScale = f
		}
		if r != nil {
			return nil, r
		}
	}
	if queueBound && (s.MaxQueueTimeFloorMs == nil) != (s.MaxQueueTimeCeilMs == nil) {
		return nil, reject(ClassInertCombination,
			"max_queue_time_floor_ms and max_queue_time_ceil_ms must both be configured for the queue SLO to apply")
	}
	d, err := newDefinition(alg, s)
	if err != nil { // the checks above make this unreachable; keep the class honest anyway
		return nil, reject(ClassInvalidValue, "%v", err)
	}
	return d, nil
}

// param reads one expression value as a setting's type. Integers may be
// quoted as plain numbers; booleans, comparators and seeds may be tokens or
// strings, as upstream Stargate accepts them.
type param struct{ expr.Param }

func (p param) invalid(format string, args ...any) *Rejection {
	return reject(ClassInvalidValue, "%s: %s", p.Key, fmt.Sprintf(format, args...))
}

func (p param) text() (string, *Rejection) {
	if k := p.Value.Kind; k == expr.Token || k == expr.String {
		return p.Value.Text, nil
	}
	return "", p.invalid("expected a token or string, got %s", p.Value.Kind)
}

func (p param) boolean() (*bool, *Rejection) {
	t, r := p.text()
	if r != nil {
		return nil, p.invalid("expected true or false")
	}
	var b bool
	switch t {
	case "true":
		b = true
	case "false":
	default:
		return nil, p.invalid("expected true or false, got %q", clip(t))
	}
	return &b, nil
}

func (p param) comparator() (*lb.Comparator, *Rejection) {
	t, r := p.text()
	if r != nil {
		return nil, r
	}
	c, err := lb.ParseComparator(t)
	if err != nil {
		return nil, p.invalid("unknown comparator %q (want one of %s)", clip(t), comparatorList)
	}
	return &c, nil
}

func (p param) unsigned() (*uint64, *Rejection) {
	var u uint64
	switch v := p.Value; v.Kind {
	case expr.Integer:
		if v.Int < 0 {
			return nil, p.invalid("expected an unsigned integer, got %d", v.Int)
		}
		u = uint64(v.Int)
	case expr.String:
		n, err := strconv.ParseUint(strings.TrimPrefix(v.Text, "+"), 10, 64)
		if !expr.IsPlainNumber(v.Text) || err != nil {
			return nil, p.invalid("expected an unsigned integer, got %q", clip(v.Text))
		}
		u = n
	default:
		return nil, p.invalid("expected an integer or quoted integer, got a %s", v.Kind)
	}
	return &u, nil
}

// positive reads an unsigned integer that must be in 1..limit; 0 is inert.
func (p param) positive(limit uint64) (*uint64, *Rejection) {
	u, r := p.unsigned()
	switch {
	case r != nil:
		return nil, r
	case *u == 0:
		return nil, reject(ClassInertValue, "%s must be positive", p.Key)
	case *u > limit:
		return nil, p.invalid("must be at most %d", limit)
	}
	return u, nil
}

func (p param) millis() (*uint64, *Rejection) {
	u, r := p.unsigned()
	if r == nil && *u > uint64(maxMillis) {
		return nil, p.invalid("must be at most %d", maxMillis)
	}
	return u, r
}

func (p param) decimal() (*float64, *Rejection) {
	var f float64
	switch v := p.Value; v.Kind {
	case expr.Integer, expr.Decimal:
		f = v.Dec
	case expr.String:
		n, err := strconv.ParseFloat(v.Text, 64)
		if !expr.IsPlainNumber(v.Text) || err != nil {
			return nil, p.invalid("expected a finite decimal, got %q", clip(v.Text))
		}
		f = n
	default:
		return nil, p.invalid("expected a number or quoted plain number, got a %s", v.Kind)
	}
	return &f, nil
}
