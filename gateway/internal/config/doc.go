// Package config is the gateway's typed configuration: the flags and
// environment variables of bin/gateway, the per-model config file and the
// API-key file, each validated once at startup with errors that name the
// flag, environment variable or file field at fault. Nothing on the request
// path re-checks configuration, and this package never reads the
// environment itself: main passes getenv in.
package config
