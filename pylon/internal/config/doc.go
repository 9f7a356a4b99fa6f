// Package config is the pylon's configuration: every setting with its
// flag, environment variable and default, and the validation that refuses
// a bad value or a contradictory combination at startup, naming the flags.
// It decides nothing at run time; the agent package wires what it holds.
package config
