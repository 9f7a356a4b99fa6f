// Package fences holds the architecture rules of the repository as data,
// and the check of a package graph against them. Its test runs the rules
// over the real graph (go list -deps over every module of go.work), so a
// forbidden import fails make test; see docs/architecture.md#package-layout-and-fences
// for what each rule keeps apart and why.
package fences
