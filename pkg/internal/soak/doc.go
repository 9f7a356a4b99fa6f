// Package soak judges a long run of the whole stack: from periodic samples
// of every process's resident memory and goroutines it decides whether they
// stayed flat after the warm-up, and it renders the short report make soak
// writes. Starting the stack and driving the load is the soak command's job
// (pkg/internal/cmd/soak); this package only holds the arithmetic, so the
// verdict can be tested without a thirty-minute run.
package soak
