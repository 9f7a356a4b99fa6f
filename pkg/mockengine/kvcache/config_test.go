package kvcache

import (
	"errors"
	"math"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{BlockTokens: 16, CharsPerToken: 4, CapacityTokens: 1024}
	tests := []struct {
		name      string
		mutate    func(*Config)
		wantField string // empty: valid
		// defaulted marks zero fields that New fills in rather than rejects.
		defaulted bool
	}{
		{"valid", func(*Config) {}, "", false},
		{"capacity zero disables caching", func(c *Config) { c.CapacityTokens = 0 }, "", false},
		{"block tokens zero", func(c *Config) { c.BlockTokens = 0 }, "BlockTokens", true},
		{"block tokens negative", func(c *Config) { c.BlockTokens = -3 }, "BlockTokens", false},
		{"chars per token zero", func(c *Config) { c.CharsPerToken = 0 }, "CharsPerToken", true},
		{"chars per token negative", func(c *Config) { c.CharsPerToken = -1 }, "CharsPerToken", false},
		{"chars per token NaN", func(c *Config) { c.CharsPerToken = math.NaN() }, "CharsPerToken", false},
		{"chars per token +Inf", func(c *Config) { c.CharsPerToken = math.Inf(1) }, "CharsPerToken", false},
		{"block too large", func(c *Config) { c.BlockTokens = 1 << 30 }, "CharsPerToken", false},
		{"capacity negative", func(c *Config) { c.CapacityTokens = -1 }, "CapacityTokens", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := valid
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.wantField {
				t.Fatalf("Validate() = %v, want ConfigError for %s", err, tt.wantField)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, does not wrap ErrInvalidConfig", err)
			}
			_, nerr := New(cfg)
			if tt.defaulted {
				if nerr != nil {
					t.Fatalf("New() = %v, want the zero field defaulted", nerr)
				}
				return
			}
			// New must surface the same typed error through its wrapping.
			if !errors.As(nerr, &ce) || ce.Field != tt.wantField || !errors.Is(nerr, ErrInvalidConfig) {
				t.Fatalf("New() = %v, want wrapped ConfigError for %s", nerr, tt.wantField)
			}
		})
	}
}

func TestNewAppliesDefaults(t *testing.T) {
	t.Parallel()
	c := newCache(t, Config{CapacityTokens: 100})
	got := c.Config()
	want := Config{BlockTokens: DefaultBlockTokens, CharsPerToken: DefaultCharsPerToken, CapacityTokens: 100}
	if got != want {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
	if bb := got.BlockBytes(); bb != 64 {
		t.Fatalf("BlockBytes() = %d, want 64", bb)
	}
	if bb := (Config{BlockTokens: 1, CharsPerToken: 0.25}).BlockBytes(); bb != 1 {
		t.Fatalf("BlockBytes() of a sub-byte block = %d, want 1", bb)
	}
}
