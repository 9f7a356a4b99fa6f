package demostack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Burst sends n streamed requests at once straight to the hub, each
// asking the mock engine for outputTokens tokens. Without the gateway's
// token the hub ignores routing headers, so the requests get no routing
// wait: once every engine slot is busy the rest are refused with 503
// overloaded_error (admission rejections), and pylons whose queue is
// longer than the hub expected refuse with a retryable 429 (retries).
// It returns the count of each status.
func (ep Endpoints) Burst(ctx context.Context, c *http.Client, tag string, n, outputTokens int) (map[int]int, error) {
	var mu sync.Mutex
	counts := map[int]int{}
	var firstErr error
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"burst %s %d"}]}`,
				ep.Model, outputTokens, tag, i)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.Hub+"/v1/chat/completions", strings.NewReader(body))
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+ep.GatewayToken)
			req.Header.Set("x-request-id", "obs-burst-"+tag+"-"+strconv.Itoa(i))
			req.Header.Set("x-model", ep.Model)
			req.Header.Set("x-input-tokens", "2000")
			req.Header.Set("x-output-tokens", strconv.Itoa(outputTokens))
			status, err := do(c, req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			counts[status]++
		})
	}
	wg.Wait()
	return counts, firstErr
}

// Errors sends the gateway two requests that must fail: one with a bad
// API key (401) and one for a model no cluster serves (404 from the hub),
// so the error panels have a status to show.
func (ep Endpoints) Errors(ctx context.Context, c *http.Client) error {
	for _, r := range []struct {
		key, model string
		want       int
	}{{"sk-not-a-key", ep.Model, http.StatusUnauthorized}, {ep.APIKey, "no-such-model", http.StatusNotFound}} {
		body := fmt.Sprintf(`{"model":%q,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, r.model)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.Gateway+"/v1/chat/completions", strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+r.key)
		status, err := do(c, req)
		if err != nil {
			return err
		}
		if status != r.want {
			return fmt.Errorf("gateway answered %d to a request that should get %d", status, r.want)
		}
	}
	return nil
}

// do sends req and reads the whole answer (streams to their end).
func do(c *http.Client, req *http.Request) (int, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}
