package fences

import (
	"fmt"
	"slices"
	"strings"
)

// Module is the import path prefix of every package of the repository;
// patterns and graphs here are written relative to it.
const Module = "github.com/stargate-router/stargate/"

// Rule is one fence. It applies to every package matching From but not
// Except. Such a package must depend (directly or not) on no package
// matching Deny, and, when Only is set, on no package of the repository
// outside Only and its own subtree.
//
// Patterns are import paths relative to Module; a trailing "/..." matches
// the path and everything below it.
type Rule struct {
	// Name identifies the rule in failures and tests.
	Name   string
	From   string
	Except []string
	Deny   []string
	Only   []string
	// Reason is the one line a reader sees when the rule fails.
	Reason string
}

// Match reports whether pkg (relative to Module) matches pattern.
func Match(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pkg == pattern
}

func matchAny(patterns []string, pkg string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return Match(p, pkg) })
}

// Applies reports whether the rule constrains pkg.
func (r Rule) Applies(pkg string) bool { return Match(r.From, pkg) && !matchAny(r.Except, pkg) }

// Violations checks graph (package -> its transitive dependencies, both
// relative to Module; dependencies outside the repository are ignored)
// against rules, and returns one line per forbidden dependency, sorted.
func Violations(graph map[string][]string, rules []Rule) []string {
	var out []string
	for pkg, deps := range graph {
		for _, r := range rules {
			if !r.Applies(pkg) {
				continue
			}
			for _, d := range deps {
				if r.forbids(pkg, d) {
					out = append(out, fmt.Sprintf("%s imports %s (fence %s: %s)", pkg, d, r.Name, r.Reason))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

func (r Rule) forbids(pkg, dep string) bool {
	if matchAny(r.Deny, dep) {
		return true
	}
	if r.Only == nil || Match(pkg+"/...", dep) {
		return false
	}
	return !matchAny(r.Only, dep)
}
