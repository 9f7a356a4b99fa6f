// Package configdoc turns the flag tables the deployable binaries print
// for --help (pkg/cli's FLAG/ENV/DEFAULT/MEANING layout) into the
// configuration reference, docs/configuration.md. The reference is
// generated, never hand-edited, so it cannot drift from the flags: make
// config-doc-check regenerates it from the built binaries and fails on any
// difference.
package configdoc
