package mockengine

import (
	"github.com/stargate-router/stargate/pkg/openai"
)

// RenderPrompt returns the bytes the engine's KV cache model hashes for a
// request body sent to path (/v1/chat/completions, /v1/completions or
// /v1/responses), or the 400 the engine would answer. It is exported for
// the gateway's tests, which check that the gateway's prompt summary names
// exactly the blocks this engine caches (kvcache.Cache.NewSequence of the
// result).
func RenderPrompt(path string, body []byte) ([]byte, error) {
	var parse func([]byte) (*generation, *openai.Error)
	switch path {
	case "/v1/chat/completions":
		parse = parseChat
	case "/v1/completions":
		parse = parseCompletion
	case "/v1/responses":
		parse = parseResponses
	default:
		return nil, openai.NotFound("no generating route %s", path)
	}
	g, oe := parse(body)
	if oe != nil {
		return nil, oe
	}
	return g.prompt, nil
}
