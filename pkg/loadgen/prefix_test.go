package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/headers"
	"github.com/stargate-router/stargate/pkg/mockengine"
	"github.com/stargate-router/stargate/pkg/prefixhash"
	"github.com/stargate-router/stargate/pkg/workload"
)

// oneShot is an anonymous request opening with prefix (64 tokens), then a
// 16-token message: "system:" + 256 bytes + "\n" and "user:" + 64 bytes
// + "\n" are 334 bytes, 5 full blocks of which the first 4 are the
// prefix's alone.
func oneShot(i int, prefix string) workload.Request {
	return workload.Request{Index: i, Turn: 1, Source: workload.SourceNone, Endpoint: "chat", NewInputTokens: 16, OutputTokens: 2,
		Prefix: prefix, PrefixTokens: 64}
}

// closedLoop is reqs on one worker, sent one after another.
func closedLoop(reqs ...workload.Request) *workload.Workload {
	return &workload.Workload{Header: workload.Header{Suite: "t", Seed: 3, Mode: workload.ModeClosed, Workers: 1}, Requests: reqs}
}

// TestPrefixOpensTheFirstTurn: a first turn with a prefix sends it as a
// system message before its user message, salted like a session id; the
// next turn of a keyless conversation re-sends it as history; the run's
// ceiling finds the prefix's full blocks in another request that opens
// with it.
func TestPrefixOpensTheFirstTurn(t *testing.T) {
	turn2 := workload.Request{Index: 1, Session: "c", Turn: 2, Source: workload.SourceNone, Endpoint: "chat", NewInputTokens: 16, OutputTokens: 2}
	first := oneShot(0, "doc-1")
	first.Session = "c"
	w := closedLoop(first, turn2, oneShot(2, "doc-1"))
	var mu sync.Mutex
	hist := map[int][]Message{}
	send := func(_ context.Context, j *Job) Result {
		mu.Lock()
		hist[j.Request.Index] = j.History
		mu.Unlock()
		return Result{Status: 200, Reply: "answer"}
	}
	out, err := NewRunner(Config{Salt: "r1"}, send).Run(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	system := Message{Role: "system", Content: workload.PrefixText(3, "r1:doc-1", 64)}
	user := workload.UserText(3, "r1:c", 1, 16)
	if h := hist[0]; len(h) != 1 || h[0] != system {
		t.Fatalf("turn 1 history %+v", h)
	}
	if h := hist[1]; len(h) != 3 || h[0] != system || h[1] != (Message{"user", user}) || h[2] != (Message{"assistant", "answer"}) {
		t.Fatalf("turn 2 history %+v", h)
	}
	if h := hist[2]; len(h) != 1 || h[0] != system {
		t.Fatalf("one-shot history %+v", h)
	}
	if r := out.Records; r[0].Prefix != "doc-1" || r[1].Prefix != "" || r[2].CacheableTokens != 64 {
		t.Fatalf("records %+v", r)
	}
	// Another salt, another prefix text.
	if workload.PrefixText(3, "r2:doc-1", 64) == system.Content {
		t.Fatal("the salt does not change the prefix")
	}
}

// TestCopiesPerBlock: the same four prompts (a shared 4-block prefix and a
// block of their own each: 8 distinct blocks) sent to one cluster are one
// copy per block; spread over two clusters the prefix is held twice, over
// four four times. Requests that reached no known cluster are not counted.
func TestCopiesPerBlock(t *testing.T) {
	w := closedLoop(oneShot(0, "p"), oneShot(1, "p"), oneShot(2, "p"), oneShot(3, "p"), oneShot(4, "p"), oneShot(5, "p"))
	for _, c := range []struct {
		clusters             []string
		fleet, copies        int64
		perBlock             float64
		fleetNew, clusterNew []int
	}{
		{[]string{"a", "a", "a", "a", "", "a"}, 8, 8, 1, []int{5, 1, 1, 1, 0, 0}, []int{5, 1, 1, 1, 0, 0}},
		{[]string{"a", "b", "a", "b", "", "b"}, 8, 12, 1.5, []int{5, 1, 1, 1, 0, 0}, []int{5, 5, 1, 1, 0, 0}},
		{[]string{"a", "b", "c", "d", "", "d"}, 8, 20, 2.5, []int{5, 1, 1, 1, 0, 0}, []int{5, 5, 5, 5, 0, 0}},
	} {
		t.Run(strings.Join(c.clusters, ""), func(t *testing.T) {
			send := func(_ context.Context, j *Job) Result {
				i := j.Request.Index
				switch i {
				case 4: // no cluster named: not counted
					return Result{Status: 200, Reply: "x"}
				case 5: // refused by a cluster: never prefilled there
					return Result{Status: 503, Err: "HTTP 503: busy", Cluster: c.clusters[i]}
				}
				return Result{Status: 200, Reply: "x", Cluster: c.clusters[i]}
			}
			out, err := NewRunner(Config{}, send).Run(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range out.Records {
				if r.FleetNewBlocks != c.fleetNew[i] || r.ClusterNewBlocks != c.clusterNew[i] {
					t.Fatalf("request %d: %d new to the fleet, %d to its cluster; want %d and %d", i, r.FleetNewBlocks, r.ClusterNewBlocks, c.fleetNew[i], c.clusterNew[i])
				}
			}
			st := Compute(out.Records, 1, 1, 0)
			if st.FleetBlocks != c.fleet || st.ClusterBlocks != c.copies || st.CopiesPerBlock != c.perBlock {
				t.Fatalf("fleet %d blocks, %d copies, %v per block; want %d, %d, %v", st.FleetBlocks, st.ClusterBlocks, st.CopiesPerBlock, c.fleet, c.copies, c.perBlock)
			}
		})
	}
}

// TestCopiesCountedOnceWhenConcurrent: identical prompts answered at the
// same time still count their blocks once per cluster.
func TestCopiesCountedOnceWhenConcurrent(t *testing.T) {
	var reqs []workload.Request
	for i := range 32 {
		r := oneShot(i, "p")
		r.NewInputTokens = 1 // a tail shorter than a block: only the prefix is cut into blocks
		reqs = append(reqs, r)
	}
	w := &workload.Workload{Header: workload.Header{Suite: "t", Seed: 3, Mode: workload.ModeClosed, Workers: 32}, Requests: reqs}
	for i := range w.Requests {
		w.Requests[i].Worker = i
	}
	var start sync.WaitGroup
	start.Add(32)
	send := func(_ context.Context, j *Job) Result {
		start.Done()
		start.Wait() // every request is in flight before any is answered
		return Result{Status: 200, Reply: "x", Cluster: fmt.Sprintf("c%d", j.Request.Index%2)}
	}
	out, err := NewRunner(Config{}, send).Run(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	// Each prompt: the prefix's 4 blocks, and its own tail is shorter
	// than a block: 4 distinct blocks, held by both clusters.
	if st := Compute(out.Records, 1, 1, 0); st.FleetBlocks != 4 || st.ClusterBlocks != 8 || st.CopiesPerBlock != 2 {
		t.Fatalf("fleet %d, cluster %d, copies %v", st.FleetBlocks, st.ClusterBlocks, st.CopiesPerBlock)
	}
}

// TestRejectionsAndCopiesHandChecked: rejections are the failures
// refused before any byte (429, 502, 503, no answer but not loadgen's
// own timeout); copies per block is the ratio of the summed block
// counts, and across runs the blocks sum and the ratio is the median.
func TestRejectionsAndCopiesHandChecked(t *testing.T) {
	fail := func(status int, msg string) Record {
		return Record{Turn: 1, Outcome: OutcomeError, Status: status, Error: msg}
	}
	blocks := func(fleet, cluster int) Record {
		r := ok("", 1, "c1", 100, 0, 10)
		r.FleetNewBlocks, r.ClusterNewBlocks = fleet, cluster
		return r
	}
	recs := []Record{
		fail(429, "HTTP 429: slow down"),
		fail(503, "HTTP 503: no capacity"),
		fail(502, "HTTP 502: upstream"),
		fail(0, "dial tcp: connection refused"),
		fail(0, errTimeout.Error()), // loadgen gave up: not a refusal
		fail(500, "HTTP 500: bug"),  // an error, not a refusal
		fail(200, "stream ended before its final event"),
		{Turn: 1, Outcome: OutcomeAborted, Error: errDeadline.Error()},
		{Turn: 2, Outcome: OutcomeSkipped},
		blocks(10, 10), blocks(0, 10), blocks(2, 4),
	}
	s := Compute(recs, 1, 1, 0)
	if s.Rejected != 4 || s.Failed != 7 {
		t.Fatalf("%d rejected of %d failed, want 4 of 7", s.Rejected, s.Failed)
	}
	if s.FleetBlocks != 12 || s.ClusterBlocks != 24 || s.CopiesPerBlock != 2 || copiesText(&s) != "2.00" {
		t.Fatalf("blocks %d / %d, copies %v (%s)", s.FleetBlocks, s.ClusterBlocks, s.CopiesPerBlock, copiesText(&s))
	}
	one := Compute([]Record{blocks(5, 5)}, 1, 1, 0)
	none := Compute([]Record{ok("", 1, "", 100, 0, 10)}, 1, 1, 0)
	if one.CopiesPerBlock != 1 || none.CopiesPerBlock != 0 || copiesText(&none) != "-" {
		t.Fatalf("one cluster %v, none %v (%s)", one.CopiesPerBlock, none.CopiesPerBlock, copiesText(&none))
	}
	third := Compute([]Record{blocks(4, 12)}, 1, 1, 0)
	agg := Aggregate([]Stats{s, one, none, third})
	// Median of 2, 1 and 3 (the run without blocks has no ratio).
	if agg.Rejected != 4 || agg.FleetBlocks != 21 || agg.ClusterBlocks != 41 || agg.CopiesPerBlock != 2 {
		t.Fatalf("aggregate: %d rejected, blocks %d / %d, copies %v", agg.Rejected, agg.FleetBlocks, agg.ClusterBlocks, agg.CopiesPerBlock)
	}
	var md strings.Builder
	writeStatsMarkdown(&md, &s)
	if !strings.Contains(md.String(), "| 12 | 3 | 7 | 4 | 1 | 1 |") || !strings.Contains(md.String(), "Copies per block across clusters: 2.00 (12 distinct") {
		t.Fatalf("markdown:\n%s", md.String())
	}
}

// TestKeylessWireAgainstMockEngine replays a small rag workload (one-shots
// and keyless follow-up conversations about shared documents) against a
// real mock engine, one request at a time: no request names a session
// (no prompt_cache_key, conversation or x-multi-turn-session-id; in hub
// mode the gateway's payload key of the whole conversation), every first
// turn opens with its document, and the engine finds exactly the run's
// ceiling, so the prefix is laid out and cut as the engine does.
func TestKeylessWireAgainstMockEngine(t *testing.T) {
	w, err := workload.Generate(workload.SuiteRAG, workload.SuiteParams{Seed: 5, Model: "m", Duration: 4 * time.Second, Docs: 3, Scale: 0.05, FollowUps: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	w.Header.Mode, w.Header.Workers = workload.ModeClosed, 1
	conversations := 0
	for i := range w.Requests {
		w.Requests[i].AtMs = 0
		if w.Requests[i].Turn == 2 {
			conversations++
		}
	}
	if conversations == 0 || len(w.Requests) < 10 {
		t.Fatalf("%d requests, %d with a follow-up: too few to check", len(w.Requests), conversations)
	}
	for _, target := range []string{TargetHub, TargetGateway} {
		t.Run(target, func(t *testing.T) {
			url, requests := startMock(t)
			c := testClient(url, target)
			out, err := NewRunner(Config{Salt: "r1"}, c.Do).Run(context.Background(), w)
			if err != nil {
				t.Fatal(err)
			}
			cached := 0
			for _, r := range out.Records {
				if r.Outcome != OutcomeOK || r.CachedTokens != r.CacheableTokens {
					t.Fatalf("request %d (turn %d): %s, engine cached %d tokens, ceiling %d", r.Index, r.Turn, r.Outcome, r.CachedTokens, r.CacheableTokens)
				}
				cached += r.CachedTokens
			}
			if cached == 0 {
				t.Fatal("no request found a shared document in the engine's cache")
			}
			seenByID := map[string]seen{}
			for _, s := range requests() {
				seenByID[s.header.Get("x-request-id")] = s
			}
			for i, r := range w.Requests {
				s := seenByID[fmt.Sprintf("loadgen-rag-r1-%d", i)]
				if _, ok := s.body["prompt_cache_key"]; ok || s.body["conversation"] != nil || s.header.Get("x-multi-turn-session-id") != "" {
					t.Fatalf("request %d names a session: body %v, header %v", i, s.body, s.header)
				}
				msgs, _ := s.body["messages"].([]any)
				if len(msgs) != 2*r.Turn {
					t.Fatalf("request %d (turn %d): %d messages, want the document and 2 per turn", i, r.Turn, len(msgs))
				}
				head := msgs[0].(map[string]any)
				if r.Turn == 1 && (head["role"] != "system" || head["content"] != workload.PrefixText(5, "r1:"+r.Prefix, r.PrefixTokens)) {
					t.Fatalf("request %d opens with %v", i, head)
				}
				key := s.header.Get("x-cache-affinity-key")
				switch {
				case target == TargetGateway && key != "":
					t.Fatalf("request %d: gateway mode sent x-cache-affinity-key %q", i, key)
				case target == TargetHub && !strings.HasPrefix(key, "mt:v1:payload:"):
					t.Fatalf("request %d: x-cache-affinity-key %q, want the payload key", i, key)
				}
				// Hub mode sends the gateway's prompt summary: the chain
				// hashes of the blocks the engine caches for this body.
				want := ""
				if target == TargetHub {
					want = engineSummary(t, s)
				}
				if got := s.header.Get(headers.StargatePromptPrefix); got != want || (target == TargetHub && got == "") {
					t.Fatalf("request %d: x-stargate-prompt-prefix %q, want %q", i, got, want)
				}
			}
		})
	}
}

// engineSummary is the prompt summary of the blocks the mock engine
// caches for the body the engine saw.
func engineSummary(t *testing.T, s seen) string {
	t.Helper()
	body, err := json.Marshal(s.body)
	if err != nil {
		t.Fatal(err)
	}
	prompt, err := mockengine.RenderPrompt(s.path, body)
	if err != nil {
		t.Fatal(err)
	}
	hashes, _ := prefixhash.AppendBlocks(nil, prefixhash.Seed, prefixhash.DefaultBlockBytes, nil, prompt)
	return prefixhash.FormatHeader(prefixhash.Summarize(hashes, prefixhash.DefaultBlockTokens))
}

// TestSweepCoversThePrefixSuites: --rates runs every open-loop suite at
// each rate, the prefix suites included.
func TestSweepCoversThePrefixSuites(t *testing.T) {
	sw := &Sweep{Names: []string{"shared-prefix", "rag", "anon-sessions", "prefix-mix"}, Points: []RatePoint{{Multiple: 1}, {Rate: 20}}}
	specs, err := sw.Expand(14)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range specs {
		got = append(got, fmt.Sprintf("%s@%g", s.Key, s.Params.Rate))
		if _, err := workload.Generate(s.Suite, s.Params); err != nil {
			t.Fatalf("%s: %v", s.Key, err)
		}
	}
	want := "shared-prefix-1x@14 shared-prefix-20@20 rag-1x@14 rag-20@20 anon-sessions-1x@14 anon-sessions-20@20 prefix-mix-1x@14 prefix-mix-20@20"
	if strings.Join(got, " ") != want {
		t.Fatalf("expanded %v", got)
	}
}
