// Package demostack runs the repository's demo (bin/demo --keep: a gateway,
// a hub and 2 regions x 2 clusters on loopback) as a child process and
// reads its URLs from what the demo prints, so the observability checks
// and the browser test of the routing page scrape, load and look at the
// same binaries `make build` produced, started the way `make demo` starts
// them.
//
// It owns the demo's lifetime: the demo runs in a process group of its own
// (a Ctrl-C in the terminal reaches only the caller, which then stops the
// demo, which stops its children), and Stop leaves nothing running, also
// when the demo does not stop when asked. The copy of the demo's output it
// hands on has the demo's credentials redacted.
package demostack
