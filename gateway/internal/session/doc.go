// Package session derives a request's session and cache-affinity key
// (docs/design/sessions.md#session-sources): the precedence of the
// sources, the validation of client ids, the mt:v1:<kind>:<sha256> key the
// hub routes on, and whether the source is eligible for last-cluster
// tracking. It is pure: no I/O, no clock, no configuration.
package session
