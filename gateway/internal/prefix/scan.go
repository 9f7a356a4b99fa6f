package prefix

import (
	"bytes"

	"github.com/stargate-router/stargate/pkg/jsonscan"
)

// member returns the raw JSON of the last member named key of the
// top-level object in body, nil when there is none or body is not an
// object. It reads the value as written, whitespace inside it included,
// which the gateway's parse tree has lost: the layout hashes a chat's
// tools exactly as the engine's decoder keeps them (json.RawMessage, the
// last duplicate winning). Anything unexpected gives nil, never a panic.
func member(body []byte, key string) []byte {
	var found []byte
	if jsonscan.Members(body, func(k []byte, start, end int) bool {
		if keyIs(k, key) {
			found = body[start:end]
		}
		return true
	}) < 0 {
		return nil
	}
	return found
}

// keyIs compares an object key as written (escapes and all) with key,
// decoding the key as the engine's encoding/json does; a key with an
// escape JSON does not define matches nothing.
func keyIs(raw []byte, key string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == key
	}
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	return jsonscan.String(q, 0) == len(q) && jsonscan.Unquote(q) == key
}
