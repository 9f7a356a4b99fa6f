package mockengine

import (
	"strings"
	"testing"
	"time"
)

func TestValidateNamesTheFlag(t *testing.T) {
	cases := []struct {
		mutate func(*Config)
		flag   string
	}{
		{func(c *Config) { c.ModelName = "" }, "--model-name"},
		{func(c *Config) { c.BlockTokens = 0 }, "--block-size-tokens"},
		{func(c *Config) { c.CharsPerToken = -1 }, "--chars-per-token"},
		{func(c *Config) { c.KVCapacityTokens = -5 }, "--kv-cache-capacity-tokens"},
		{func(c *Config) { c.TTFT = -time.Millisecond }, "--ttft-ms"},
		{func(c *Config) { c.TokenDelay = -time.Millisecond }, "--token-delay-ms"},
		{func(c *Config) { c.ColdPrefillTPS = -1 }, "--prefill-tokens-per-s"},
		{func(c *Config) { c.CachedPrefillTPS = -1 }, "--cached-prefill-tokens-per-s"},
		{func(c *Config) { c.TimeScale = 0 }, "--time-scale"},
		{func(c *Config) { c.NumTokens = 0 }, "--num-tokens"},
		{func(c *Config) { c.MaxConcurrent = -1 }, "--max-concurrent-requests"},
		{func(c *Config) { c.MaxWaiting = -1 }, "--max-waiting-requests"},
		{func(c *Config) { c.MaxBodyBytes = 0 }, "--max-body-bytes"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		c.mutate(&cfg)
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("error %v does not name %s", err, c.flag)
		}
	}
	d := DefaultConfig()
	if err := d.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
}

func TestScaleAndPrefillWork(t *testing.T) {
	c := DefaultConfig()
	c.ColdPrefillTPS, c.CachedPrefillTPS, c.TimeScale = 1000, 0, 10
	if got := c.prefillWork(500, 10_000); got != 500*time.Millisecond {
		t.Fatalf("work = %v; cached tokens at rate 0 must be free", got)
	}
	if got := c.scale(time.Second); got != 100*time.Millisecond {
		t.Fatalf("scale(1s) at 10x = %v", got)
	}
}
