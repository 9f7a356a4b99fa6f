package headers_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/stargate-router/stargate/pkg/headers"
)

// A gateway forwarding a client request: strip what the client may not set,
// derive the session, drop the raw session id, then stamp trusted values.
func ExampleStripInbound() {
	out := http.Header{}
	out.Set("Authorization", "Bearer sk-test")
	out.Set(headers.MultiTurnSessionID, "sess-42")
	out.Set(headers.StargateLastClusterID, "cluster-chosen-by-client")
	out.Set(headers.Priority, "0")

	headers.StripInbound(out)
	session := out.Get(headers.MultiTurnSessionID) // still there for session derivation
	headers.StripSessionIDs(out)
	out.Set(headers.InputTokens, headers.FormatUint(1536))

	keys := slices.Sorted(maps.Keys(out))
	fmt.Println(session)
	fmt.Println(keys)
	// Output:
	// sess-42
	// [Authorization X-Input-Tokens]
}

// The hub reading x-max-wait-ms: absent is fine, present-but-blank is a 400.
func ExampleGetUint64() {
	h := http.Header{}
	h.Set(headers.MaxWaitMs, "")
	_, present, err := headers.GetUint64(h, headers.MaxWaitMs)
	fmt.Println(present, err)

	h.Set(headers.MaxWaitMs, "250")
	ms, _, _ := headers.GetUint64(h, headers.MaxWaitMs)
	fmt.Println(headers.MillisDuration(ms))
	// Output:
	// true invalid x-max-wait-ms header: value is empty (want a decimal integer from 0 to 18446744073709551615)
	// 250ms
}
