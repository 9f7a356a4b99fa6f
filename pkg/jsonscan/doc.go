// Package jsonscan reads JSON in place, for the parsers that run on every
// request and every streamed event. encoding/json decodes by reflection,
// and on the request path that cost is most of the CPU a small answer
// takes: the gateway's aggregation of a streamed answer, the pylon's body
// check and statistics each paid an Unmarshal per body or per event. This
// package walks the bytes once, without allocating, and hands out the raw
// bytes of each key and value; its callers decode only what they keep.
//
// It owns two families of functions. The checking ones (Valid,
// ValidMembers, TopObject, Object, Array, Value, String, Number, Literal)
// accept exactly the texts encoding/json accepts, or less, with its
// nesting limit (MaxDepth), so a caller that hands whatever they refuse to
// encoding/json gets the same result either way, only slower. The
// trusting ones (SkipSpace, StringEnd, ValueEnd, Members, EachMember,
// EachElement) find the ends of strings, values and members in bytes
// already known to be valid JSON, faster because they check nothing; on
// other bytes they give a wrong answer or -1, never a panic. Unquote and
// ParseInt decode a checked string or number token as encoding/json fills
// a string or an integer field.
//
// It decides nothing: what a member means, and when a case it leaves alone
// (a key written with escapes, a value of an unexpected kind) must go to
// encoding/json, is up to its callers.
package jsonscan
