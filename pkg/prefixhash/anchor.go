package prefixhash

import (
	"strconv"
	"strings"

	"github.com/stargate-router/stargate/pkg/headers"
)

// AnchorBlocks is how deep into the prompt AnchorKey reaches (32 blocks,
// 512 estimated tokens at the default geometry): deep enough that
// requests sharing a system prompt or a document share it, and that an
// anonymous conversation's first message, which every later turn
// re-sends, makes it the conversation's own.
const AnchorBlocks = 32

// AnchorKeyPrefix starts every AnchorKey, in the affinity-key namespace
// the gateway's session keys use ("mt:v1:<kind>:").
const AnchorKeyPrefix = "mt:v1:prefix:"

// AnchorKey is the affinity key the hub chooses a backend and an engine
// inside a cluster by for a request without a session key: the summary's
// first checkpoint at or past AnchorBlocks, or its last when the prompt is
// shorter, in hex. Requests that share the prompt up to there get the
// same key, so a shared prefix is cached on one engine of a cluster
// rather than on each in turn. The empty string for an empty summary.
func AnchorKey(s Summary) string {
	h, ok := AnchorHash(s)
	if !ok {
		return ""
	}
	return AnchorKeyPrefix + strconv.FormatUint(h, 16)
}

// AnchorHash is the checkpoint hash AnchorKey names: the summary's first
// checkpoint at or past AnchorBlocks, or its last when the prompt is
// shorter. It reports false for an empty summary.
func AnchorHash(s Summary) (uint64, bool) {
	if len(s.Hashes) == 0 {
		return 0, false
	}
	for j := range s.Hashes {
		if s.Blocks(j) >= AnchorBlocks {
			return s.Hashes[j], true
		}
	}
	return s.Hashes[len(s.Hashes)-1], true
}

// InnerKey is the key that chooses the backend and the engine inside the
// chosen cluster for a request with affinity key affinityKey and summary s:
// AnchorKey(s) when the request has no session key (none, or the
// gateway's per-request payload key), else affinityKey. The hub's proxy
// and the routing simulator both place requests by it.
func InnerKey(affinityKey string, s Summary) string {
	if len(s.Hashes) > 0 && (affinityKey == "" || strings.HasPrefix(affinityKey, headers.PayloadKeyPrefix)) {
		return AnchorKey(s)
	}
	return affinityKey
}
