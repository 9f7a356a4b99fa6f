package lbconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/stargate-router/stargate/hub/internal/lb"
)

// ConfigError is an lb-config.json error. It says where in the file the
// problem is, which algorithm it concerns and which field, so an operator
// can fix the file from the startup log alone.
type ConfigError struct {
	// Path locates the entry, e.g. `models["llama"].request_algorithms["pulsar"]`;
	// empty for the top-level object.
	Path string
	// Algorithm is the canonical name of the entry's algorithm, when known.
	Algorithm string
	// Field is the offending field (comma-joined when several); empty when
	// the entry as a whole is wrong.
	Field string
	Err   error
}

// Error returns "<path>: <problem>".
func (e *ConfigError) Error() string {
	if e.Path == "" {
		return e.Err.Error()
	}
	return e.Path + ": " + e.Err.Error()
}

// Unwrap returns the underlying problem (often an *lb.FieldError).
func (e *ConfigError) Unwrap() error { return e.Err }

// set is one config set (the top level, or one models.<id> entry): a
// configured definition and the definitions a request may select instead
// (docs/load-balancing.md#which-definition-serves-a-request).
type set struct {
	configured *Definition
	requested  [numAlgorithms + 1]*Definition
	// model marks a models.<id> set, which falls back to the top-level
	// request_algorithms (step 5 of the resolution order).
	model bool
}

// Config is a loaded lb-config.json: the default set and one set per model.
// It is immutable and safe for concurrent use.
type Config struct {
	def    set
	models map[string]*set
	defs   []*Definition
}

// Summary is what the hub logs once after loading ("load balancer config
// loaded").
type Summary struct {
	// DefaultLB is the canonical name of the default algorithm.
	DefaultLB string
	// ModelOverrides is the number of models entries.
	ModelOverrides int
}

// Summary returns the fields of the "load balancer config loaded" log.
func (c *Config) Summary() Summary {
	return Summary{DefaultLB: c.def.configured.alg.String(), ModelOverrides: len(c.models)}
}

// ModelAlgorithms returns the canonical name of the configured algorithm
// of every models entry, by model id: what /debug/state and the
// lb_config_info metric show beside Summary's DefaultLB.
func (c *Config) ModelAlgorithms() map[string]string {
	out := make(map[string]string, len(c.models))
	for id, s := range c.models {
		out[id] = s.configured.alg.String()
	}
	return out
}

// HasModel reports whether the file has a models entry for model. The hub
// treats such a model as one it serves even while no pylon has registered
// it, so a request for it waits for a backend instead of getting the 404
// of an unknown model.
func (c *Config) HasModel(model string) bool {
	_, ok := c.models[model]
	return ok
}

// Definitions returns every definition of the config: the factory must
// accept each of them at startup, so a bad definition fails the hub's start
// rather than the first request that selects it.
func (c *Config) Definitions() []*Definition { return slices.Clone(c.defs) }

// Resolve returns the definition that serves model when the request asks
// for override (0: no override), in the order of
// docs/load-balancing.md#which-definition-serves-a-request. It reports false
// when override is not available for model. It does not allocate.
func (c *Config) Resolve(model string, override Algorithm) (*Definition, bool) {
	s := &c.def
	if ms, ok := c.models[model]; ok {
		s = ms
	}
	// An override naming the configured algorithm uses the configured
	// definition even when request_algorithms has a detailed entry of the
	// same name: this check comes first, as in upstream Stargate, so a
	// header naming the model's own algorithm never switches its settings.
	if override == 0 || override == s.configured.alg {
		return s.configured, true
	}
	if override > numAlgorithms {
		return nil, false
	}
	if d := s.requested[override]; d != nil {
		return d, true
	}
	if s.model {
		if d := c.def.requested[override]; d != nil {
			return d, true
		}
	}
	return nil, false
}

func (c *Config) add(d *Definition) *Definition {
	d.index = len(c.defs)
	c.defs = append(c.defs, d)
	return d
}

// Permissive returns the configuration of a hub started without
// --lb-config-path: power-of-n by default, and every algorithm selectable
// per request with default settings (docs/load-balancing.md#loading). An
// empty file is not this; see Parse.
func Permissive() *Config {
	c := &Config{models: map[string]*set{}}
	c.def.configured = c.add(mustDefinition(PowerOfN))
	for _, a := range algorithms {
		c.def.requested[a] = c.add(mustDefinition(a))
	}
	return c
}

func mustDefinition(a Algorithm) *Definition {
	d, err := newDefinition(a, Settings{})
	if err != nil {
		panic(err) // default settings are valid for every algorithm
	}
	return d
}

// Load reads and parses the lb-config.json at path.
func Load(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseFile(path, data)
}

// ReadFile reads the lb-config.json at path, with the error Load gives.
// A reload reads first and parses only bytes it has not seen.
func ReadFile(path string) ([]byte, error) {
	data, err := os.ReadFile(path) //nolint:gosec // G304: the operator names the file.
	if err != nil {
		return nil, fmt.Errorf("failed to read lb config file: %s: %w", path, err)
	}
	return data, nil
}

// ParseFile parses data read from path, naming path in the error as Load
// does; the *ConfigError stays reachable with errors.As.
func ParseFile(path string, data []byte) (*Config, error) {
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse lb config file: %s: %w", path, err)
	}
	return c, nil
}

// Parse parses an lb-config.json document. Every error is a *ConfigError.
// `{}` is valid: power-of-n by default and no request_algorithms, so any
// other override is unavailable.
func Parse(data []byte) (*Config, error) {
	top, err := object(data)
	if err != nil {
		return nil, &ConfigError{Err: fmt.Errorf("lb config must be a JSON object: %w", err)}
	}
	if unknown := unknownKeys(top, "default", "request_algorithms", "models"); unknown != "" {
		return nil, &ConfigError{Field: unknown,
			Err: fmt.Errorf("unknown field(s): %s (want default, request_algorithms, models)", unknown)}
	}
	c := &Config{models: map[string]*set{}}
	defAlg := PowerOfN
	if raw, ok := top["default"]; ok {
		if defAlg, err = defaultName(raw); err != nil {
			return nil, err
		}
	}
	c.def.configured = c.add(mustDefinition(defAlg))
	if raw, ok := top["request_algorithms"]; ok {
		if err := c.requestAlgorithms("request_algorithms", raw, &c.def.requested, true); err != nil {
			return nil, err
		}
	}
	if raw, ok := top["models"]; ok {
		models, err := object(raw)
		if err != nil {
			return nil, &ConfigError{Path: "models", Err: fmt.Errorf("must be an object of model id to entry: %w", err)}
		}
		for _, id := range sortedKeys(models) {
			path := "models[" + strconv.Quote(id) + "]"
			d, nested, err := parseEntry(path, models[id])
			if err != nil {
				return nil, err
			}
			s := &set{configured: c.add(d), model: true}
			if nested != nil {
				if err := c.requestAlgorithms(path+".request_algorithms", nested, &s.requested, true); err != nil {
					return nil, err
				}
			}
			c.models[id] = s
		}
	}
	return c, nil
}

func defaultName(raw json.RawMessage) (Algorithm, error) {
	switch firstByte(raw) {
	case '"':
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return 0, &ConfigError{Path: "default", Err: err}
		}
		a, ok := ParseAlgorithm(name)
		if !ok {
			return 0, &ConfigError{Path: "default", Err: unknownAlgorithm(name)}
		}
		return a, nil
	case '{':
		return 0, &ConfigError{Path: "default", Err: errors.New(
			"default must be an algorithm name only, not a detailed config object; it always has default settings (give settings under models or request_algorithms)")}
	default:
		return 0, &ConfigError{Path: "default", Err: errors.New("default must be an algorithm name")}
	}
}

// requestAlgorithms parses a request_algorithms map into dst. register is
// false for a map nested inside a request_algorithms entry: it is parsed (so
// a broken one still fails) and then discarded, as upstream Stargate does.
func (c *Config) requestAlgorithms(path string, raw json.RawMessage, dst *[numAlgorithms + 1]*Definition, register bool) error {
	if isNull(raw) {
		return nil
	}
	m, err := object(raw)
	if err != nil {
		return &ConfigError{Path: path, Err: fmt.Errorf("must be an object of algorithm name to entry: %w", err)}
	}
	keys := make(map[Algorithm]string, len(m))
	for _, k := range sortedKeys(m) {
		p := path + "[" + strconv.Quote(k) + "]"
		d, nested, err := parseEntry(p, m[k])
		if err != nil {
			return err
		}
		if nested != nil {
			var discard [numAlgorithms + 1]*Definition
			if err := c.requestAlgorithms(p+".request_algorithms", nested, &discard, false); err != nil {
				return err
			}
		}
		if !register {
			continue
		}
		ka, ok := ParseAlgorithm(k)
		if !ok || ka != d.alg {
			return &ConfigError{Path: p, Algorithm: d.alg.String(),
				Err: fmt.Errorf("request_algorithms key %s does not match configured algorithm %s", k, d.alg)}
		}
		if prev, dup := keys[ka]; dup {
			return &ConfigError{Path: p, Algorithm: d.alg.String(),
				Err: fmt.Errorf("request_algorithms keys %s and %s both name algorithm %s", prev, k, d.alg)}
		}
		keys[ka] = k
		dst[ka] = c.add(d)
	}
	return nil
}

// parseEntry parses a models or request_algorithms entry: an algorithm name
// or a detailed object. It returns the entry's own request_algorithms map,
// if any, for the caller to honour or discard.
func parseEntry(path string, raw json.RawMessage) (*Definition, json.RawMessage, error) {
	switch firstByte(raw) {
	case '"':
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return nil, nil, &ConfigError{Path: path, Err: err}
		}
		a, ok := ParseAlgorithm(name)
		if !ok {
			return nil, nil, &ConfigError{Path: path, Err: unknownAlgorithm(name)}
		}
		return mustDefinition(a), nil, nil
	case '{':
	default:
		return nil, nil, &ConfigError{Path: path,
			Err: errors.New("load-balancer model config must be an algorithm name or detailed config object")}
	}
	m, err := object(raw)
	if err != nil {
		return nil, nil, &ConfigError{Path: path, Err: err}
	}
	tag, ok := m["algorithm"]
	if !ok {
		return nil, nil, &ConfigError{Path: path, Field: "algorithm", Err: errors.New(`detailed config object needs an "algorithm" field`)}
	}
	var name string
	if firstByte(tag) != '"' || json.Unmarshal(tag, &name) != nil {
		return nil, nil, &ConfigError{Path: path, Field: "algorithm", Err: errors.New("algorithm must be an algorithm name")}
	}
	alg, ok := ParseAlgorithm(name)
	if !ok {
		return nil, nil, &ConfigError{Path: path, Field: "algorithm", Err: unknownAlgorithm(name)}
	}
	var unsupported []string
	for _, k := range sortedKeys(m) {
		if k == "algorithm" || k == "request_algorithms" {
			continue
		}
		if f, ok := fieldIndex[k]; !ok || !f.algs.has(alg) {
			unsupported = append(unsupported, k)
		}
	}
	if len(unsupported) > 0 {
		list := strings.Join(unsupported, ", ")
		return nil, nil, &ConfigError{Path: path, Algorithm: alg.String(), Field: list,
			Err: fmt.Errorf("%s config does not support field(s): %s", alg, list)}
	}
	var s Settings
	for i := range fields {
		f := &fields[i]
		raw, ok := m[f.name]
		if !ok {
			continue
		}
		if err := decodeField(f, &s, raw); err != nil {
			return nil, nil, &ConfigError{Path: path, Algorithm: alg.String(), Field: f.name,
				Err: &lb.FieldError{Algorithm: alg.String(), Field: f.name, Problem: err.Error()}}
		}
	}
	d, err := newDefinition(alg, s)
	if err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			ce.Path = path
		}
		return nil, nil, err
	}
	var sub json.RawMessage
	if r, ok := m["request_algorithms"]; ok && !isNull(r) {
		sub = r
	}
	return d, sub, nil
}

// decodeField decodes one field's JSON value into s. JSON null leaves the
// field unset, except for comparator: a present comparator must be a
// comparator (docs/load-balancing.md#fields-of-a-detailed-object).
func decodeField(f *field, s *Settings, raw json.RawMessage) error {
	null := isNull(raw)
	if null && f.kind != kindComparator {
		return nil
	}
	switch f.kind {
	case kindBool:
		var v bool
		if firstByte(raw) != 't' && firstByte(raw) != 'f' || json.Unmarshal(raw, &v) != nil {
			return fmt.Errorf("must be true or false, got %s", snippet(raw))
		}
		*f.b(s) = &v
	case kindUint:
		v, err := strconv.ParseUint(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil {
			return fmt.Errorf("must be a non-negative integer, got %s", snippet(raw))
		}
		*f.u(s) = &v
	case kindFloat:
		var v float64
		if c := firstByte(raw); (c != '-' && (c < '0' || c > '9')) || json.Unmarshal(raw, &v) != nil {
			return fmt.Errorf("must be a number, got %s", snippet(raw))
		}
		*f.f(s) = &v
	case kindString:
		var v string
		if firstByte(raw) != '"' || json.Unmarshal(raw, &v) != nil {
			return fmt.Errorf("must be a string, got %s", snippet(raw))
		}
		*f.s(s) = &v
	case kindComparator:
		var name string
		if null || firstByte(raw) != '"' || json.Unmarshal(raw, &name) != nil {
			return fmt.Errorf("must be one of %s, got %s", comparatorList, snippet(raw))
		}
		v, err := lb.ParseComparator(name)
		if err != nil {
			return fmt.Errorf("must be one of %s, got %q", comparatorList, name)
		}
		s.Comparator = &v
	case kindWeight:
		var name string
		if firstByte(raw) != '"' || json.Unmarshal(raw, &name) != nil {
			return fmt.Errorf("must be one of max-input-tps, last-mean-input-tps, got %s", snippet(raw))
		}
		var v RendezvousWeight
		if err := v.UnmarshalText([]byte(name)); err != nil {
			return err
		}
		s.RendezvousWeight = &v
	}
	return nil
}

func unknownAlgorithm(name string) error {
	return fmt.Errorf("unknown load-balancer algorithm %q (want one of power-of-n, wait-and-widen, round-robin, random, pulsar, pulsar-wait-and-widen, prefix-affinity or an alias; names are case-sensitive)", name)
}

// object decodes a JSON object, refusing any other JSON type.
func object(raw []byte) (map[string]json.RawMessage, error) {
	if firstByte(raw) != '{' {
		return nil, fmt.Errorf("got %s", snippet(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return m, nil
}

func unknownKeys(m map[string]json.RawMessage, known ...string) string {
	var bad []string
	for _, k := range sortedKeys(m) {
		if !slices.Contains(known, k) {
			bad = append(bad, k)
		}
	}
	return strings.Join(bad, ", ")
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func firstByte(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

// snippet shows a JSON value in an error, shortened so a huge value cannot
// flood the log.
func snippet(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	if len(raw) > 40 {
		return string(raw[:40]) + "…"
	}
	return string(raw)
}
