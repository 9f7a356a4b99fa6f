// Package headers is the single definition of every x-* HTTP header name
// exchanged between the tiers (client -> gateway -> hub -> pylon -> engine and
// the responses going back), with the parse and format rules each tier applies
// to their values and the strip lists that keep untrusted callers from
// steering routing. It must not make routing, session or admission decisions:
// it only says what a header is called, what a well-formed value looks like,
// and which headers a given boundary removes. The contract it implements,
// header by header, is docs/design/headers.md#gateway-to-hub and the sections
// around it.
//
// # Trust model
//
// The hub acts on every x-stargate-* header and every hub-facing routing
// header (x-model, x-input-tokens, x-cache-affinity-key, ...) it receives
// without judging who sent it; keeping clients out is the gateway's job
// (docs/design/headers.md#who-strips-what). A relay that forwards a copy of
// a client's headers calls StripInbound on it, derives those headers itself,
// and calls StripInternalResponse on what it sends back. StripInbound
// deliberately keeps the headers a gateway reads from clients (x-request-id,
// x-multi-turn-session-id, the region headers), so it is safe to run before
// or after session derivation; StripSessionIDs then removes the raw session
// ids from the outbound copy, because only their hash may leave the gateway.
//
// # Value rules
//
// Numeric headers, when present, must be non-blank after trimming spaces and
// tabs and must be a plain decimal that fits the type; a blank numeric
// header is an error, not an absent one, because a sender that writes the
// header meant to send a number. Text headers (x-model, x-routing-key,
// x-cache-affinity-key, x-stargate-last-cluster-id) are read as visible
// ASCII, trimmed, and treated as absent when blank or malformed. Parsers
// never allocate on success, and every error is an *Error that names the
// header and wraps one of the sentinel errors so callers can branch with
// errors.Is. The full rules are docs/design/headers.md#parsing-rules.
package headers
