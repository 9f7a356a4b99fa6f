// Package serve runs a binary's HTTP listeners until its context ends, then
// drains them: new connections stop at once, in-flight requests and streams
// get a bounded grace period, and whatever remains is closed.
package serve
