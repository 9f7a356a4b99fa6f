// Package resolve looks up the addresses behind a host name with a bound
// on an injected clock. Both the pylon (one tunnel per hub address) and the
// gateway (one hub per address) turn a name such as a Kubernetes headless
// Service into one peer per address and look it up again periodically;
// this is the lookup they share.
package resolve
