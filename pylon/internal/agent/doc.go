// Package agent is the running pylon: it wires the configuration into the
// stats collector, the engine proxy and the tunnel client, and owns the
// bring-up order (docs/pylon.md#startup): listeners and the collector
// first, then the engine health wait, then each model's initialisation
// and calibration, and only then the tunnels to the hubs, so a hub never
// sees a model before its input-TPS bootstrap is done.
//
// It also owns what the tunnels publish: the set of published models and
// the registration snapshot built from the collector's statistics, with a
// broadcast that wakes every hub's registration stream when they change.
// The statistics themselves belong to the stats package, the request path
// to engineproxy and the wire protocol to tunnel.
package agent
