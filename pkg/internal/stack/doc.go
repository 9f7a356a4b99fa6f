// Package stack starts this project's whole system on loopback as child
// processes and stops it again: a gateway with embedded Olric and
// last-cluster tracking, a hub, and a fleet of clusters, each a pylon in
// front of a mock engine. bin/demo runs DemoFleet through it and
// `loadgen campaign --compare` runs BenchFleet once per arm.
//
// It owns the processes it starts (free loopback ports, readiness polling,
// one log file per child, stopping every child it started, also when Start
// fails half way), the credentials they share, the fleet's command lines and
// what a benchmark records around a stack: the engines' cache counters and
// every binary's build_info. For the fault-injection suite it also runs
// several gateways whose Olric nodes form one cluster, passes extra flags
// to chosen children, and kills, terminates and restarts single children
// where they were. For the request-path benchmark it chains relay-floor
// hops (bare reverse proxies) in front of the first engine and tells a
// caller each child's process id. It does not generate load or judge
// results.
//
// Children run in process groups of their own, so a Ctrl-C in the terminal
// reaches only the parent, which then calls Stop: nothing is left behind
// unless the parent itself is killed with SIGKILL.
package stack
