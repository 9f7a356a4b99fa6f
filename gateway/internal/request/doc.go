// Package request extracts from an OpenAI request body the few fields the
// gateway acts on (model, stream, session sources, the parts the token
// estimate reads, output maxima) and rewrites the body when the hub needs a
// different one (routed model, forced stream). It parses once and never
// validates what only the engine cares about: unknown fields survive and
// the body is forwarded byte for byte whenever no rewrite is needed, and
// a rewrite splices the changed members into a copy rather than encoding
// the body again.
package request
