// Package scaleout holds the end-to-end tests of a scaled-out deployment on
// loopback: several hub replicas and several gateways as real processes
// (pkg/internal/stack), every pylon tunnelled to every hub and every
// gateway spreading its requests over the hubs. They check that hubs agree
// on where a session goes without sharing state, that a session keeps its
// cluster whichever hub and gateway carry its turns, and that losing a hub
// under load loses no request that had not started streaming.
//
// The tests need the built binaries and skip without them:
//
//	go test ./internal/scaleout -args -bin ../bin
//
// `make e2e` runs them.
package scaleout
