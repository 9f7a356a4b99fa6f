// Package lbfactory turns a validated lb-config definition into a concrete
// load balancer. It is the one place that knows every algorithm package, so
// that lbconfig (parsing, resolution, expressions) and the algorithms stay
// independent of each other.
package lbfactory
