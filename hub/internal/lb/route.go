package lb

import (
	"time"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Route is the load balancer resolved for one request: the picker and the
// per-definition rules the routing pass applies around it. It lives here,
// beside Picker, so that the configuration that builds routes
// (hub/internal/lbconfig) and the passes that use them (hub/internal/dispatch,
// the proxy, the simulator) share it without importing one another.
//
// A Route is a small value; copying it shares the picker.
type Route struct {
	// Algorithm is the canonical name, for labels and logs.
	Algorithm string
	Picker    Picker
	// RequireAffinityKey makes a request without x-cache-affinity-key a 400.
	RequireAffinityKey bool
	// MaxInputWorkSeconds is max_input_work_seconds; it is enforced only
	// when HasInputWorkLimit is set (docs/design/hub-request.md#input-work-admission).
	MaxInputWorkSeconds float64
	HasInputWorkLimit   bool
	// AdmissionNeedsWeight restricts input-work admission to clusters with a
	// valid input TPS (pulsar and pulsar-wait-and-widen, which can rank
	// only those), and AdmissionConsidersKV also drops clusters that fail
	// the free-KV check (consider_kv_free_tokens on those algorithms).
	AdmissionNeedsWeight bool
	AdmissionConsidersKV bool
	// LastClusterAffinity reports that the algorithm classifies sessions, so
	// the pass reports a session selection class for its choices.
	LastClusterAffinity bool
	// AffinityWait is how long the algorithm holds a session for its
	// affinity group before widening (cache_affinity_wait_ms; 0 for the
	// algorithms without one). The proxy lets a returning session queue
	// that long on its last cluster when the cluster's pylon reports a
	// queue the hub had not counted
	// (docs/design/hub-request.md#queue-refusals).
	AffinityWait time.Duration
	// UsesPrefix reports that the algorithm reads Request.Prefix (the
	// prefix-affinity algorithm, or prefix_affinity on wait-and-widen and
	// pulsar-wait-and-widen). The proxy looks the prompt's summary up in
	// its prefix index only for such routes, so every other algorithm pays
	// nothing for it (docs/load-balancing.md#content-prefix-affinity).
	UsesPrefix bool
}

// Resolver picks the Route for a routing target and the requested
// algorithm. The hub's resolver is lbconfig.Resolver; tests use small
// fixed ones.
type Resolver interface {
	// Resolve returns the route for t. requested is the trimmed
	// x-routing-method value ("" when the request names none): a method
	// name, or a routing expression (method;k=v…). A request the
	// configuration cannot serve gets a Rejection, answered as a 400.
	Resolve(t routing.Target, requested string) (Route, *Rejection)
	// KnownMethod reports whether method (an x-routing-method value, or
	// the part of a routing expression before its first ';') names an
	// algorithm or alias at all. The proxy asks before it reads the
	// numeric headers; whether the method is configured for the model is
	// Resolve's answer, later (docs/design/hub-request.md#parse-order).
	KnownMethod(method string) bool
}

// Rejection is why a routing header was refused: Class is the error code of
// the 400 (unknown_method, unavailable, malformed_expression, …; the full
// list is in docs/load-balancing.md#error-classes) and Message explains it
// to the client.
type Rejection struct {
	Class   string
	Message string
}

// Error returns the message.
func (r *Rejection) Error() string { return r.Message }
