// Package answer turns the hub's answer into what the client asked for.
// The hub serves chat and Responses only as server-sent events; this
// package reads those events one by one (the server forwards and flushes
// each to a streaming client), folds a chat stream into one
// chat.completion object, or picks the terminal Responses object, for a
// client that did not ask to stream. It also extracts the token usage from
// events and JSON bodies for the token metrics and rate-limit settlement,
// and builds the error event that ends a stream the hub did not finish,
// in the shape the OpenAI SDKs raise on. It never touches the network:
// the server owns the writes.
package answer
