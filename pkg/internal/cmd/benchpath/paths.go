package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/stargate-router/stargate/pkg/internal/stack"
)

// model is the one model the bench fleet serves.
const model = "bench-model"

// cluster is the bench fleet's one cluster: its pylon and engine are
// "pylon-bench" and "engine-bench".
const cluster = "bench"

// path is one way a request reaches the engine.
type path struct {
	// Name is the key in file names and the -paths flag.
	Name string
	// Label is what the report calls it.
	Label string
	// Tiers are the processes the request crosses, edge first; the
	// engine is always last.
	Tiers []string
}

// relays are the path's tiers without the engine.
func (p path) relays() []string { return p.Tiers[:len(p.Tiers)-1] }

// allPaths are the paths a run measures, shortest first: the engine
// alone, one to three relay-floor hops (the least a Go HTTP hop costs
// here), the hub and pylon alone, and the whole chain without and with a
// session key.
var allPaths = []path{
	{Name: "direct", Label: "engine direct", Tiers: []string{"engine"}},
	{Name: "floor-1", Label: "1 relay-floor hop", Tiers: []string{"floor-1", "engine"}},
	{Name: "floor-2", Label: "2 relay-floor hops", Tiers: []string{"floor-2", "floor-1", "engine"}},
	{Name: "floor-3", Label: "3 relay-floor hops", Tiers: []string{"floor-3", "floor-2", "floor-1", "engine"}},
	{Name: "spine", Label: "hub + pylon", Tiers: []string{"hub", "pylon", "engine"}},
	{Name: "chain", Label: "gateway + hub + pylon", Tiers: []string{"gateway", "hub", "pylon", "engine"}},
	{Name: "chain-key", Label: "gateway + hub + pylon, session key", Tiers: []string{"gateway", "hub", "pylon", "engine"}},
}

// pathsByName resolves a comma-separated list of path names ("all" for
// every one) in allPaths' order.
func pathsByName(list string) ([]path, error) {
	if list == "all" {
		return allPaths, nil
	}
	want := map[string]bool{}
	for n := range strings.SplitSeq(list, ",") {
		want[strings.TrimSpace(n)] = true
	}
	var out []path
	for _, p := range allPaths {
		if want[p.Name] {
			out = append(out, p)
			delete(want, p.Name)
		}
	}
	for n := range want {
		return nil, fmt.Errorf("unknown path %q", n)
	}
	return out, nil
}

// childOf is the stack's child name of a tier.
func childOf(tier string) string {
	switch tier {
	case "engine", "pylon":
		return tier + "-" + cluster
	}
	return tier
}

// rotate is paths started at position round mod len(paths): each round
// runs the paths in an order shifted by one, so no path always runs
// first (on a cold machine) or right after the heaviest.
func rotate[T any](paths []T, round int) []T {
	if len(paths) == 0 {
		return nil
	}
	k := round % len(paths)
	return append(append([]T(nil), paths[k:]...), paths[:k]...)
}

// filler is the prompt text: plain words, nothing JSON must escape.
const filler = "The quick brown fox jumps over the lazy dog while the router relays every byte. "

// chatBody is a chat completion request of exactly size bytes when size
// is at least its fixed part (else of that fixed part): a system message
// and a user message padded with filler, outTokens output tokens, and a
// prompt_cache_key when sessionKey is not empty.
func chatBody(size int, stream bool, sessionKey string, outTokens int) []byte {
	head := `{"model":"` + model + `","max_tokens":` + strconv.Itoa(outTokens) + `,"stream":` + strconv.FormatBool(stream)
	if sessionKey != "" {
		head += `,"prompt_cache_key":"` + sessionKey + `"`
	}
	head += `,"messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"`
	tail := `"}]}`
	n := max(size-len(head)-len(tail), 0)
	var b strings.Builder
	b.Grow(len(head) + n + len(tail))
	b.WriteString(head)
	for b.Len() < len(head)+n {
		b.WriteString(filler[:min(len(filler), len(head)+n-b.Len())])
	}
	b.WriteString(tail)
	return []byte(b.String())
}

// row is one load shape: body size, concurrent clients, streamed or not.
type row struct {
	Size    int  `json:"size_bytes"`
	Clients int  `json:"clients"`
	Stream  bool `json:"stream"`
}

func (r row) String() string {
	mode := "non-streaming"
	if r.Stream {
		mode = "streaming"
	}
	cl := "clients"
	if r.Clients == 1 {
		cl = "client"
	}
	return fmt.Sprintf("%s, %d %s, %s", sizeName(r.Size), r.Clients, cl, mode)
}

// file is the row in a file name.
func (r row) file() string {
	mode := "json"
	if r.Stream {
		mode = "sse"
	}
	return fmt.Sprintf("%s-c%d-%s", sizeName(r.Size), r.Clients, mode)
}

// sizeName prints a size in KiB when it is whole KiB.
func sizeName(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// requester builds the requests of one path and row.
type requester struct {
	url     string
	headers http.Header
	// bodies are per client (a session key differs per client), or one
	// shared by all.
	bodies [][]byte
	// spine sends the hub what the gateway would: a unique request id.
	spine bool
	seq   *atomic.Uint64
	// sse says the answer is an event stream to parse.
	sse bool
}

// newRequester is how the client reaches p at r. Every path gets the same
// chat body except two: the session-key chain adds prompt_cache_key (one
// session per client, so each one's later turns find its last cluster),
// and hub + pylon is always asked to stream, because the pylon refuses an
// unstreamed chat (it observes answers through their events) and the
// gateway always streams from the hub for that reason; in a
// non-streaming row that path reads the stream whole.
func newRequester(p path, r row, ep stack.Endpoints, outTokens int) requester {
	q := requester{headers: http.Header{"Content-Type": {"application/json"}}, seq: new(atomic.Uint64), sse: r.Stream}
	stream := r.Stream
	switch p.Name {
	case "direct":
		q.url = ep.Engines[cluster]
	case "spine":
		q.url, q.spine, stream = ep.Hub, true, true
		q.headers.Set("Authorization", "Bearer "+ep.GatewayToken)
		q.headers.Set("X-Model", model)
		// The gateway's estimate: about four bytes per token.
		q.headers.Set("X-Input-Tokens", strconv.Itoa(r.Size/4))
	case "chain", "chain-key":
		q.url = ep.Gateway
		q.headers.Set("Authorization", "Bearer "+ep.APIKey)
	default: // floor-N
		n, _ := strconv.Atoi(strings.TrimPrefix(p.Name, "floor-"))
		q.url = ep.FloorHops[n-1]
	}
	q.url += "/v1/chat/completions"
	if p.Name == "chain-key" {
		for c := range r.Clients {
			q.bodies = append(q.bodies, chatBody(r.Size, stream, fmt.Sprintf("benchpath-%03d", c), outTokens))
		}
	} else {
		q.bodies = [][]byte{chatBody(r.Size, stream, "", outTokens)}
	}
	return q
}

// request is client c's next request.
func (q requester) request(ctx context.Context, c, _ int) (*http.Request, error) {
	body := q.bodies[c%len(q.bodies)]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = q.headers.Clone()
	if q.spine {
		req.Header.Set("X-Request-Id", "benchpath-"+strconv.FormatUint(q.seq.Add(1), 10))
	}
	return req, nil
}
