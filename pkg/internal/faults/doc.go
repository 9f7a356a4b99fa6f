// Package faults is the fault-injection suite: the real binaries (gateway,
// hub, pylons, mock engines) run on loopback as child processes of package
// stack, and each test breaks one part under load: a pylon killed, an
// engine failing on one cluster, the hub restarted, gateways and their
// Olric nodes lost, an engine reporting poisoned statistics. A test
// asserts by count what the clients saw against the bound it states
// (requests failed that could have been served, streams cut without an
// error, requests sent to a broken cluster), never by throughput.
//
// The package holds only tests, and they skip unless told where the
// binaries are: `go test -count=1 ./internal/faults -args -bin ../bin`
// from pkg/ (or STARGATE_FAULTS_BIN). docs/reliability.md#fault-injection lists
// the scenarios, their bounds and the measured results.
package faults
