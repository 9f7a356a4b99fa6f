// Package jsonscan reads JSON in place for the pylon's per-request and
// per-event parsers: it validates a document exactly as encoding/json's
// Valid does, only faster, and finds an object's members or an array's
// elements without decoding them. It decodes nothing and decides nothing:
// what a member means, and when a case this reader leaves alone (escaped
// or non-ASCII keys) must go to encoding/json, is up to its callers.
package jsonscan
