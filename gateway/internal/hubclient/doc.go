// Package hubclient sends the gateway's requests to the hub: it builds the
// outbound request with exactly the headers of the gateway-hub contract
// (docs/design/headers.md#gateway-to-hub; nothing is copied from the
// client), authenticates the
// gateway to the hub with its own bearer token in place of the client's,
// and owns the pooled transport. It makes no routing decision and does
// not interpret responses.
package hubclient
