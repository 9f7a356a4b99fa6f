// Package demostack runs the repository's demo (bin/demo --keep: a gateway,
// a hub and 2 regions x 2 clusters on loopback) as a child process and
// reads the hub's admin URL from what the demo prints, so the browser test
// looks at the same binaries and the same stack `make demo` starts.
//
// It owns the demo's lifetime: the demo runs in a process group of its own
// (a Ctrl-C in the terminal reaches only the test, which then stops the
// demo, which stops its children), and Stop leaves nothing running, also
// when the demo does not stop when asked.
package demostack
