// Package envcheck proves that a chart can set every setting of its
// binary: each environment variable the binary's --help lists is either
// wired by the chart's templates or accepted under the chart's config
// value (values.schema.json lists those names), and a value given under
// config reaches the container. A flag added to a binary therefore fails
// charts-check until its chart can set it.
package envcheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
)

// Input is what one chart is checked with.
type Input struct {
	// Chart names the chart in messages.
	Chart string
	// Help lists the binary's variables (its --help ENV column).
	Help []string
	// Allowed are the config keys the chart's schema accepts.
	Allowed []string
	// Rendered are the env names of the binary's container in a render
	// with every feature on and no probe values: Allowed ones came from
	// config, the rest the templates wired.
	Rendered []string
	// Runtime are names the chart may set that are not flags (GOMEMLIMIT).
	Runtime []string
	// Probed is the container env of a render that set every Allowed key
	// to Probe(key).
	Probed map[string]string
}

// Probe is the value the probe render gives config key name.
func Probe(name string) string { return "probe-" + name }

// Check returns one problem per variable the chart cannot set or sets
// without the binary knowing it, and per config key that does not reach
// the container.
func Check(in Input) []string {
	help, allowed := set(in.Help), set(in.Allowed)
	wired := map[string]bool{}
	for _, n := range in.Rendered {
		if !allowed[n] {
			wired[n] = true
		}
	}
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, in.Chart+": "+fmt.Sprintf(format, args...))
	}
	for _, n := range in.Help {
		if !allowed[n] && !wired[n] {
			add("%s (a flag of the binary) cannot be set: add it to config's names in values.schema.json, or wire it in the templates", n)
		}
	}
	for _, n := range sorted(allowed) {
		if !help[n] {
			add("values.schema.json allows config.%s, which the binary does not know", n)
		}
		if got, ok := in.Probed[n]; !ok {
			add("config.%s does not reach the container's env", n)
		} else if got != Probe(n) {
			add("config.%s reaches the container as %q, want %q (something else sets it too)", n, got, Probe(n))
		}
	}
	runtime := set(in.Runtime)
	for _, n := range sorted(wired) {
		if !help[n] && !runtime[n] {
			add("the templates set %s, which the binary does not know", n)
		}
	}
	return problems
}

func set(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SchemaConfigNames reads the names a values.schema.json accepts under
// config: properties.config.propertyNames.enum, following one local $ref.
func SchemaConfigNames(path string) ([]string, error) {
	raw, err := os.ReadFile(path) // #nosec G304 -- a chart's schema, named by the caller
	if err != nil {
		return nil, err
	}
	var doc struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Defs       map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	node, ok := doc.Properties["config"]
	if !ok {
		return nil, fmt.Errorf("%s: no properties.config", path)
	}
	var cfg struct {
		Ref           string `json:"$ref"`
		PropertyNames struct {
			Enum []string `json:"enum"`
		} `json:"propertyNames"`
	}
	if err := json.Unmarshal(node, &cfg); err != nil {
		return nil, fmt.Errorf("%s: properties.config: %w", path, err)
	}
	if cfg.Ref != "" {
		name, ok := strings.CutPrefix(cfg.Ref, "#/$defs/")
		if !ok || doc.Defs[name] == nil {
			return nil, fmt.Errorf("%s: properties.config: $ref %q is not a local $defs entry", path, cfg.Ref)
		}
		if err := json.Unmarshal(doc.Defs[name], &cfg); err != nil {
			return nil, fmt.Errorf("%s: $defs.%s: %w", path, name, err)
		}
	}
	if len(cfg.PropertyNames.Enum) == 0 {
		return nil, errors.New(path + ": config has no propertyNames.enum: list the names it accepts")
	}
	if !slices.IsSorted(cfg.PropertyNames.Enum) {
		return nil, errors.New(path + ": config's propertyNames.enum is not sorted (keep it sorted so additions are easy to review)")
	}
	return cfg.PropertyNames.Enum, nil
}
