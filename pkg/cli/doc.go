// Package cli parses a binary's command line and environment into typed
// settings: every flag has an environment variable, environment values are
// applied first and flags override them, and --help lists flag, variable and
// default in one table.
//
// It owns only parsing and the help text. Each binary validates the parsed
// values itself, naming the flag in its error.
package cli
