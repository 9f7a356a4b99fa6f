// Package lbconfig turns lb-config.json and the x-routing-method header into
// load-balancer definitions for the hub
// (docs/load-balancing.md#configuration-reference).
//
// It owns three decisions and nothing else:
//   - what a configuration file means: which fields each algorithm accepts,
//     their defaults and normalisation, and the error that names the field,
//     the algorithm and the place in the file when it is wrong (Parse, Load);
//   - which definition serves a request: the override resolution
//     (docs/load-balancing.md#which-definition-serves-a-request) and the
//     routing expressions (docs/load-balancing.md#routing-expressions)
//     (Config.Resolve, Config.Compile);
//   - which picker instance serves it: Resolver keeps one lb.Picker per
//     (routing target, definition) and a small per-target cache of compiled
//     expressions, and implements lb.Resolver, returning lb.Route values.
//
// It does not implement any algorithm: a Factory supplied by the caller maps
// a Definition to a concrete picker. A Definition is immutable once built,
// so it is shared freely between goroutines and used as an identity. It sits
// below the request path: nothing here imports the proxy, the routing pass
// or the state store.
package lbconfig
