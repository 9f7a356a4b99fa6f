// Package server is the gateway's HTTP edge: the chi router and middleware
// stack (recover, request id and HTTP metrics, client API-key auth, the 400
// for a client-supplied x-priority) and the handlers of the
// OpenAI-compatible API.
//
// A POST API request is an exchange (endpoint.go) that reads top-down:
// parse the body (Prepare: session, estimates, outbound headers and body),
// apply the model URI allowlist, admit it with the rate limiter, look up
// the session's last cluster, call the hub (its response head and, for a
// non-streaming request, the whole exchange bounded on the injected
// clock), then write the answer the client asked for (write.go: events
// one by one, one aggregated object, or the hub's JSON or error passed
// through; a stream the hub did not finish ends with an error event and
// an aborted response, never as a complete one) and settle the
// reservation against the reported usage. The decisions themselves live in the
// packages it calls. Errors reach the client in the OpenAI shape;
// hub-internal headers never do.
package server
