// Package breaker decides, per backend, whether the hub may send it a
// request, from the outcomes of the requests it already sent it: a circuit
// breaker with a count window, a cool-down and half-open probing.
//
// A backend whose tunnel is up can still be broken behind it: its engine
// answers 500, hangs until the head timeout, or drops streams half way.
// Routing by load alone keeps sending it work, because a failing backend
// looks idle. The breaker turns outcomes into an exclusion: after
// Config.Failures failures among a backend's last Config.Window outcomes
// (none older than Config.MaxAge) it opens and refuses requests; after
// Config.CoolDown it lets one probe through (half-open); the probe's
// success closes it, its failure reopens it with the cool-down doubled, up
// to Config.MaxCoolDown.
//
// It owns the state machine and nothing else. It does not classify
// answers (the caller reports Success, Failure or Ignored), does not pick
// a backend or a cluster, does no I/O, exports no metrics (Config's
// OnTransition hook tells the caller) and never waits: time comes from an
// injected clock, so every transition is tested with a fake one.
package breaker
