// Package relay reads the hub's server-sent events and turns them into
// what a client asked for: events relayed one by one (the caller flushes
// each), or one aggregated chat.completion / terminal Responses object for
// a client that did not ask to stream. It also pulls the usage out of
// events and bodies for token metrics and rate-limit settlement. It never
// touches the network itself.
package relay
