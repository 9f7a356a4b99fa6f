// Package answer turns the hub's answer into what the client asked for.
// The hub serves chat and Responses only as server-sent events; this
// package reads those events one by one (the server forwards them to a
// streaming client, flushing whatever one read from the hub brought),
// folds a chat stream into one chat.completion object, or picks the
// terminal Responses object, for a client that did not ask to stream. It
// also extracts the token usage from events and JSON bodies for the token
// metrics and rate-limit settlement, and builds the error event that ends
// a stream the hub did not finish, in the shape the OpenAI SDKs raise on.
// Events are decoded in one pass over jsonscan's strict walk, which
// agrees with encoding/json on everything it accepts; the rest goes to
// encoding/json, so the common event costs no reflection. It never
// touches the network: the server owns the writes.
package answer
