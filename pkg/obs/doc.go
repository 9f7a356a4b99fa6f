// Package obs builds the observability plumbing every binary shares: the
// slog logger selected by --log-format and --log-level, and an explicit
// Prometheus registry with the Go and process collectors.
//
// Nothing here registers on a global; each binary builds its own in main and
// passes it down.
package obs
