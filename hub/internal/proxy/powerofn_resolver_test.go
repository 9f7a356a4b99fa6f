package proxy

import (
	"fmt"
	"strings"

	"github.com/stargate-router/stargate/hub/internal/lb"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// canonical maps every algorithm name and alias (after
// trimming, lower-casing and turning _ into -) to its canonical name.
var canonical = map[string]string{
	"power-of-n": "power-of-n", "power-of-two": "power-of-n", "powerof2": "power-of-n", "powerofn": "power-of-n",
	"wait-and-widen": "wait-and-widen", "groq-multiregion": "wait-and-widen",
	"round-robin": "round-robin", "random": "random", "pulsar": "pulsar",
	"pulsar-wait-and-widen": "pulsar-wait-and-widen", "pulsar-multiregion": "pulsar-wait-and-widen",
}

// normalizeAlgorithm returns the canonical algorithm named by an
// x-routing-method value, or false.
func normalizeAlgorithm(v string) (string, bool) {
	name, ok := canonical[strings.ReplaceAll(strings.ToLower(strings.TrimSpace(v)), "_", "-")]
	return name, ok
}

// PowerOfNResolver routes every model with one power-of-n picker, the
// tests' default resolver (the hub itself resolves with lbconfig). A request may name
// power-of-n (or an alias); any other known algorithm is unavailable and
// unknown names are invalid, both 400.
type PowerOfNResolver struct {
	Picker lb.Picker
}

// KnownMethod implements lb.Resolver.
func (r PowerOfNResolver) KnownMethod(method string) bool {
	_, ok := normalizeAlgorithm(method)
	return ok
}

// Resolve implements lb.Resolver.
func (r PowerOfNResolver) Resolve(_ routing.Target, requested string) (lb.Route, *lb.Rejection) {
	if strings.Contains(requested, ";") {
		return lb.Route{}, &lb.Rejection{Class: "unavailable", Message: "routing expressions need an lb-config on this hub"}
	}
	if requested != "" {
		name, ok := normalizeAlgorithm(requested)
		if !ok {
			return lb.Route{}, &lb.Rejection{Class: "unknown_method", Message: fmt.Sprintf("unknown routing method %q", requested)}
		}
		if name != "power-of-n" {
			return lb.Route{}, &lb.Rejection{Class: "unavailable", Message: fmt.Sprintf("routing algorithm %q is not configured on this hub", name)}
		}
	}
	return lb.Route{Algorithm: "power-of-n", Picker: r.Picker}, nil
}
