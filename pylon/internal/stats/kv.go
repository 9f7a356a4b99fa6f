package stats

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// kvStats is the body of the KV-cache stats endpoint
// (docs/design/statistics.md#kv-cache-polling).
// Other keys are ignored; a missing or mistyped field, or a count above
// MaxKVTokens, fails the poll; used and free are clamped to the capacity.
type kvStats struct {
	Model    *string `json:"model"`
	Capacity *uint64 `json:"kv_cache_capacity_tokens"`
	Used     *uint64 `json:"kv_cache_used_tokens"`
	Free     *uint64 `json:"kv_cache_free_tokens"`
}

// maxKVBody bounds the KV stats body read.
const maxKVBody = 1 << 20

// runKVPoll polls engine's KV stats at once and then KVPollInterval after
// each poll ends.
func (c *Collector) runKVPoll(ctx context.Context, engine int) {
	c.pollEngineKV(ctx, engine)
	c.every(ctx, KVPollInterval, func() { c.pollEngineKV(ctx, engine) })
}

// pollKV polls every engine's KV stats once, one after the other.
func (c *Collector) pollKV(ctx context.Context) {
	for i := range c.streamURLs {
		if c.kvURLOf(i) != "" {
			c.pollEngineKV(ctx, i)
		}
	}
}

// pollEngineKV fetches engine's KV stats once, with a KVPollTimeout
// deadline on the injected clock, and applies them to the named model if
// it has a generation: the model's published KV fields are the sums over
// the engines of each engine's last successful poll. A failed poll keeps
// the engine's last values.
func (c *Collector) pollEngineKV(ctx context.Context, engine int) {
	kvURL := c.kvURLOf(engine)
	kv, err := c.fetchKV(ctx, kvURL)
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !c.kvFailed[engine] {
			c.log.Warn("KV-cache stats poll failed; keeping the last values", "url", kvURL, "err", err)
		}
		c.kvFailed[engine] = true
		return
	}
	if c.kvFailed[engine] {
		c.log.Info("KV-cache stats poll recovered", "url", kvURL)
		c.kvFailed[engine] = false
	}
	model := *kv.Model
	if strings.TrimSpace(model) == "" {
		c.log.Warn("dropping KV-cache stats without a model id", "url", kvURL)
		return
	}
	g := c.gens[model]
	if g == nil {
		// Before the first model is added (startup waits for the engine
		// and calibrates first) this is expected, not worth a warning.
		if len(c.gens) > 0 {
			c.log.Warn("dropping KV-cache stats for a model with no live generation", "model", model, "url", kvURL)
		}
		return
	}
	g.kv[engine] = kvVal{capacity: *kv.Capacity, used: *kv.Used, free: *kv.Free}
	var sum kvVal
	for _, v := range g.kv {
		sum.capacity, sum.used, sum.free = addSat(sum.capacity, v.capacity), addSat(sum.used, v.used), addSat(sum.free, v.free)
	}
	changed := !g.kvSeen || g.kvCap != sum.capacity || g.kvUsed != sum.used || g.kvFree != sum.free
	g.kvCap, g.kvUsed, g.kvFree = sum.capacity, sum.used, sum.free
	g.kvSeen = true
	g.observedAt = c.clk.Now()
	if changed {
		c.signal()
	}
}

func (c *Collector) fetchKV(ctx context.Context, kvURL string) (kvStats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := c.clk.AfterFunc(KVPollTimeout, cancel)
	defer deadline.Stop()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, kvURL, nil)
	if err != nil {
		return kvStats{}, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return kvStats{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxKVBody))
		return kvStats{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	var kv kvStats
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxKVBody)).Decode(&kv); err != nil {
		return kvStats{}, fmt.Errorf("decoding body: %w", err)
	}
	if kv.Model == nil || kv.Capacity == nil || kv.Used == nil || kv.Free == nil {
		return kvStats{}, fmt.Errorf("body lacks model or a kv_cache_*_tokens field")
	}
	if max(*kv.Capacity, *kv.Used, *kv.Free) > MaxKVTokens {
		return kvStats{}, fmt.Errorf("a kv_cache_*_tokens value above %d", uint64(MaxKVTokens))
	}
	// Neither can exceed the capacity: a free count above it would make
	// the hub think any prompt fits; a used count above it means full.
	*kv.Used, *kv.Free = min(*kv.Used, *kv.Capacity), min(*kv.Free, *kv.Capacity)
	return kv, nil
}
