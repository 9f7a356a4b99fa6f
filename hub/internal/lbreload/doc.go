// Package lbreload owns the hub's active lb-config.json: it loads the file
// at startup, reloads it on request (SIGHUP, a file watch), and swaps the
// active configuration only for one that is valid as a whole.
//
// A reload reads the file and compares a hash of its bytes with the active
// configuration's: the same content is "unchanged" and nothing happens.
// New content is parsed and every definition is built through the picker
// factory into a fresh lbconfig.Resolver, exactly as at startup; any error
// rejects the file (logged with the field lbconfig names, counted) and the
// old configuration keeps serving. A valid one becomes a new Generation:
// the OnApply hook hands it to the proxy first, then it becomes Current,
// so whatever reports the new hash (metrics, /debug/state) never runs
// ahead of what routes requests.
//
// A generation's resolver starts with no per-target state: round-robin
// counters and cached routing expressions begin afresh. The resolver
// metrics (lbconfig.Metrics) are registered once and shared by every
// generation. The package exports the lb_config_* metrics
// (docs/load-balancing.md#changing-routing-live). It does not watch files
// (hub/internal/filewatch does) or route requests.
package lbreload
