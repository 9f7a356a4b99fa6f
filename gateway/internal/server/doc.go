// Package server is the gateway's HTTP edge: the chi router and middleware
// stack (recover, request id and HTTP metrics, client API-key auth, the 400
// for a client-supplied x-priority), and
// the handlers of the OpenAI-compatible API. A handler parses the body,
// derives session and headers, asks the rate limiter, looks up the last
// cluster, calls the hub and relays or aggregates the answer; the
// decisions themselves live in the packages it calls. Errors reach the
// client in the OpenAI shape; hub-internal headers never do.
package server
