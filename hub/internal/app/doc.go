// Package app is the running hub: it wires a validated configuration into
// the load-balancer resolver (hub/internal/lbconfig), the routing state
// (hub/internal/state), the tunnel server pylons dial (hub/internal/tunnel)
// and the request path (hub/internal/proxy), serves the API, metrics and
// backend listeners, and drains them on shutdown. It also answers the
// hub's own endpoints, GET /v1/models on the API listener and
// GET /debug/state on the admin (metrics) listener, and decides who may
// call each listener: the gateway token on the API listener, the
// registration token on the backend listener, the optional admin token on
// the admin listener.
//
// The hub's command only parses and validates the flags (Config) and runs
// an App; everything that decides lives in the packages above.
package app
