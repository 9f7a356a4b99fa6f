package mockengine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/stargate-router/stargate/pkg/clock"
)

func TestSDKEmbeddingsFloat(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	texts := []string{"hello world", strings.Repeat("x", 100)}
	resp, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model:          "embed-model",
		Input:          openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: texts},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatFloat,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Model != "embed-model" || string(resp.Object) != "list" || len(resp.Data) != 2 {
		t.Fatalf("response = %+v", resp)
	}
	for i, d := range resp.Data {
		want := []float64{float64(i), float64(i) + 0.125, -float64(i) - 0.25}
		if d.Index != int64(i) || string(d.Object) != "embedding" || len(d.Embedding) != 3 ||
			d.Embedding[0] != want[0] || d.Embedding[1] != want[1] || d.Embedding[2] != want[2] {
			t.Fatalf("data[%d] = %+v, want %v", i, d, want)
		}
	}
	// 11 bytes -> 3 tokens, 100 bytes -> 25 tokens.
	if resp.Usage.PromptTokens != 28 || resp.Usage.TotalTokens != 28 {
		t.Fatalf("usage = %+v, want 28", resp.Usage)
	}
}

func TestSDKEmbeddingsBase64AndTokens(t *testing.T) {
	_, url := startServer(t, fastConfig())
	c := sdk(url)
	resp, err := c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model:          "embed-model",
		Input:          openai.EmbeddingNewParamsInputUnion{OfString: openai.String("abcd")},
		EncodingFormat: openai.EmbeddingNewParamsEncodingFormatBase64,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 1 || resp.Data[0].JSON.Embedding.Raw() != `"AAAAAAAAAAA="` || resp.Usage.PromptTokens != 1 {
		t.Fatalf("base64 response = %s", resp.RawJSON())
	}
	// Token-id inputs count by their length: one array is one input.
	resp, err = c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "embed-model",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokenArrays: [][]int64{{1, 2, 3}, {4, 5}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 2 || resp.Usage.PromptTokens != 5 {
		t.Fatalf("token arrays response = %s", resp.RawJSON())
	}
	resp, err = c.Embeddings.New(t.Context(), openai.EmbeddingNewParams{
		Model: "embed-model",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfTokens: []int64{7, 8, 9, 10}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Data) != 1 || resp.Usage.PromptTokens != 4 {
		t.Fatalf("token array response = %s", resp.RawJSON())
	}
}

func TestEmbeddingsBadInput(t *testing.T) {
	_, url := startServer(t, fastConfig())
	cases := []struct {
		name, body  string
		code, param string
	}{
		{"malformed json", `{"model":`, "invalid_json", ""},
		{"missing model", `{"input":"x"}`, "missing_field", "model"},
		{"missing input", `{"model":"m"}`, "missing_field", "input"},
		{"empty input array", `{"model":"m","input":[]}`, "missing_field", "input"},
		{"input object", `{"model":"m","input":{"a":1}}`, "invalid_type", "input"},
		{"mixed items", `{"model":"m","input":["a",3]}`, "invalid_type", "input[1]"},
		{"empty token array", `{"model":"m","input":[[]]}`, "invalid_type", "input[0]"},
		{"model not string", `{"model":1,"input":"x"}`, "invalid_type", "model"},
		{"bad encoding", `{"model":"m","input":"x","encoding_format":"int8"}`, "invalid_value", "encoding_format"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := postJSON(t, url+"/v1/embeddings", c.body, nil)
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400", resp.StatusCode)
			}
			e := decodeError(t, resp)
			if e.Error.Code != c.code || e.Error.Param != c.param {
				t.Fatalf("error = %+v, want code %q param %q", e.Error, c.code, c.param)
			}
		})
	}
}

// TestEmbeddingsStatsMetricsAndCounters: one finished stats event without a
// generated count, prompt tokens in vllm:prompt_tokens_total, and the
// test-control counter under "embeddings".
func TestEmbeddingsStatsMetricsAndCounters(t *testing.T) {
	e, url := startServer(t, fastConfig())
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/pylon/v1/stats/stream", nil)
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	lines := bufio.NewScanner(stream.Body)
	if !lines.Scan() {
		t.Fatal("no first ping")
	}
	resp := postJSON(t, url+"/v1/embeddings", `{"model":"m","input":["12345678","x"]}`, map[string]string{"x-request-id": "canary-e1"})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-request-id") != "canary-e1" {
		t.Fatalf("status %d, x-request-id %q", resp.StatusCode, resp.Header.Get("x-request-id"))
	}
	for lines.Scan() {
		if strings.Contains(lines.Text(), `"ping"`) {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		_, hasGenerated := ev["tokens_generated"]
		if ev["request_id"] != "canary-e1" || ev["model"] != "m" || ev["tokens_processed"] != float64(3) || hasGenerated || ev["finished"] != true {
			t.Fatalf("stats event %s", lines.Text())
		}
		break
	}
	cancel()
	snap := e.control.snapshot()
	found := false
	for _, c := range snap.Counters {
		if c.Endpoint == "embeddings" && c.Model == "m" && c.RequestClass == classPylon && c.Count == 1 {
			found = true
		}
	}
	if !found {
		t.Fatalf("counters %+v", snap.Counters)
	}
	mresp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, want := range []string{
		`vllm:prompt_tokens_total{model_name="test-model"} 3`,
		`vllm:generation_tokens_total{model_name="test-model"} 0`,
		`vllm:num_requests_running{model_name="test-model"} 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestEmbeddingsAdmission: embeddings have no modelled delay, but they wait
// for a running slot like any request and answer 429 when the queue is full.
func TestEmbeddingsAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := timingConfig()
		cfg.MaxConcurrent = 1
		cfg.MaxWaiting = 1
		e, _ := newEngine(t, cfg, clock.Real{})
		start := time.Now()
		// A chat request holds the only slot for 1s prefill + 100ms + 2x10ms.
		go serve(t.Context(), e, chatBody(false, prompt1000('a')), nil)
		synctest.Wait()
		embed := func() *timedWriter {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "/v1/embeddings", strings.NewReader(`{"model":"m","input":"x"}`))
			w := newTimedWriter()
			e.Handler(nil).ServeHTTP(w, req)
			return w
		}
		done := make(chan *timedWriter)
		go func() { done <- embed() }()
		synctest.Wait()
		// The waiting room (1) is now full: the next one is refused at once.
		if w := embed(); w.snapshot()[0].status != http.StatusTooManyRequests {
			t.Fatalf("third request status %d, want 429", w.snapshot()[0].status)
		}
		w := <-done
		evs := w.snapshot()
		if evs[0].status != http.StatusOK || !near(time.Since(start), 1120*time.Millisecond) {
			t.Fatalf("queued embedding answered %d after %v, want 200 after the chat's 1.12s", evs[0].status, time.Since(start))
		}
		// Without contention it answers with no delay at all.
		t0 := time.Now()
		if w := embed(); w.snapshot()[0].status != http.StatusOK || time.Since(t0) != 0 {
			t.Fatalf("idle embedding: status %d after %v", w.snapshot()[0].status, time.Since(t0))
		}
	})
}
