// Package expr parses the syntax of a routing expression, the
// `<method>;key=value;…` form of the x-routing-method header
// (docs/load-balancing.md#routing-expressions).
//
// It checks only syntax: the RFC 8941 Item-with-Parameters grammar narrowed
// by the rules P1–P11 (see Rule). It knows nothing about algorithms,
// parameter names or their meaning; package lbconfig resolves the method
// and applies the parameters. Parse never panics on any input and keeps
// the whole expression under a small fixed size, because the header comes
// straight from clients.
package expr
