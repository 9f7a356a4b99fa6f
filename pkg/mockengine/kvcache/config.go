package kvcache

import (
	"errors"
	"fmt"
	"math"

	"github.com/stargate-router/stargate/pkg/prefixhash"
)

const (
	// DefaultBlockTokens is vLLM's default block size, so hit rates measured
	// against the mock round the same way as against a real engine. It is
	// prefixhash's, so the gateway's prompt summary counts the same blocks.
	DefaultBlockTokens = prefixhash.DefaultBlockTokens
	// DefaultCharsPerToken is the usual rule of thumb for English text with
	// BPE tokenizers; the mock has no real tokenizer.
	DefaultCharsPerToken = prefixhash.DefaultCharsPerToken
)

// maxBlockBytes bounds one block so the int conversion of
// BlockTokens*CharsPerToken cannot overflow and a typo cannot turn every
// prompt into a single uncacheable tail.
const maxBlockBytes = 1 << 24

// ErrInvalidConfig is wrapped by every error that Config.Validate returns, so
// callers can branch with errors.Is without parsing messages.
var ErrInvalidConfig = errors.New("invalid kvcache config")

// ConfigError names the Config field that failed validation; callers that
// print flag names recover it with errors.As.
type ConfigError struct {
	// Field is the Go name of the offending Config field.
	Field string
	// Reason says what the field must be and what it was.
	Reason string
}

// Error implements error.
func (e *ConfigError) Error() string {
	return fmt.Sprintf("kvcache config field %s: %s", e.Field, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) hold for every ConfigError.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// Config sets the cache geometry and size.
type Config struct {
	// BlockTokens is how many tokens one cache block holds; only whole
	// blocks are cached.
	BlockTokens int
	// CharsPerToken converts prompt bytes to estimated tokens.
	CharsPerToken float64
	// CapacityTokens bounds the stored tokens; 0 disables caching, so every
	// lookup misses and nothing is stored.
	CapacityTokens int64
}

// WithDefaults returns c with zero BlockTokens and CharsPerToken replaced by
// the defaults. CapacityTokens is left alone because 0 is meaningful there.
func (c Config) WithDefaults() Config {
	if c.BlockTokens == 0 {
		c.BlockTokens = DefaultBlockTokens
	}
	if c.CharsPerToken == 0 {
		c.CharsPerToken = DefaultCharsPerToken
	}
	return c
}

// Validate reports the first bad field as a *ConfigError. It checks c as
// given; apply WithDefaults first to accept zero fields.
func (c Config) Validate() error {
	switch {
	case c.BlockTokens < 1:
		return &ConfigError{Field: "BlockTokens", Reason: fmt.Sprintf("must be >= 1, got %d", c.BlockTokens)}
	case math.IsNaN(c.CharsPerToken) || math.IsInf(c.CharsPerToken, 0) || c.CharsPerToken <= 0:
		return &ConfigError{Field: "CharsPerToken", Reason: fmt.Sprintf("must be finite and > 0, got %v", c.CharsPerToken)}
	case float64(c.BlockTokens)*c.CharsPerToken > maxBlockBytes:
		return &ConfigError{Field: "CharsPerToken", Reason: fmt.Sprintf("BlockTokens*CharsPerToken = %v bytes per block exceeds %d", float64(c.BlockTokens)*c.CharsPerToken, maxBlockBytes)}
	case c.CapacityTokens < 0:
		return &ConfigError{Field: "CapacityTokens", Reason: fmt.Sprintf("must be >= 0, got %d", c.CapacityTokens)}
	}
	return nil
}

// BlockBytes is how many bytes of prompt text make one block. It is at least
// 1 so that a tiny CharsPerToken still makes progress through the text.
func (c Config) BlockBytes() int {
	return prefixhash.BlockBytes(c.BlockTokens, c.CharsPerToken)
}
