package lbconfig

import "strings"

// Algorithm is a load-balancing algorithm. The zero value means "none" (no
// override requested).
type Algorithm uint8

// The algorithms, by canonical name (docs/load-balancing.md#algorithm-names).
const (
	PowerOfN Algorithm = iota + 1
	WaitAndWiden
	RoundRobin
	Random
	Pulsar
	PulsarWaitAndWiden
	PrefixAffinity
	numAlgorithms = iota
)

// algorithms lists every algorithm in a fixed order (the permissive
// default offers all of them).
var algorithms = [...]Algorithm{PowerOfN, WaitAndWiden, RoundRobin, Random, Pulsar, PulsarWaitAndWiden, PrefixAffinity}

// AllAlgorithms returns every algorithm in a fixed order. It returns an
// array, a copy, so no caller can change the list.
func AllAlgorithms() [len(algorithms)]Algorithm { return algorithms }

var canonicalNames = [numAlgorithms + 1]string{
	PowerOfN:           "power-of-n",
	WaitAndWiden:       "wait-and-widen",
	RoundRobin:         "round-robin",
	Random:             "random",
	Pulsar:             "pulsar",
	PulsarWaitAndWiden: "pulsar-wait-and-widen",
	PrefixAffinity:     "prefix-affinity",
}

// fileNames are the names lb-config.json accepts, exactly as written: the
// file is case-sensitive, as upstream Stargate's is, so "Pulsar" is an error
// there (only the header is normalised). Upstream keeps two copies of this
// list; one table here keeps the bare-name and detailed-tag forms in sync
// by construction.
var fileNames = map[string]Algorithm{
	"power-of-n": PowerOfN, "power-of-two": PowerOfN, "powerOf2": PowerOfN, "powerOfN": PowerOfN,
	"powerof2": PowerOfN, "powerofn": PowerOfN,
	"wait-and-widen": WaitAndWiden, "groq-multiregion": WaitAndWiden,
	"round-robin":           RoundRobin,
	"random":                Random,
	"pulsar":                Pulsar,
	"pulsar-wait-and-widen": PulsarWaitAndWiden, "pulsar-multiregion": PulsarWaitAndWiden,
	"prefix-affinity": PrefixAffinity,
}

// headerNames are the file names after the header normalisation (lower
// case, '_' → '-'); every alias survives it ("powerOf2" → "powerof2").
var headerNames = func() map[string]Algorithm {
	m := make(map[string]Algorithm, len(fileNames))
	for name, a := range fileNames {
		m[strings.ToLower(name)] = a
	}
	return m
}()

// maxMethodLen bounds the stack buffer ParseMethod normalises into; the
// longest name is 21 bytes.
const maxMethodLen = 32

// String returns the canonical kebab-case name used in labels and logs.
func (a Algorithm) String() string {
	if a >= 1 && a <= numAlgorithms {
		return canonicalNames[a]
	}
	return "none"
}

// ParseAlgorithm returns the algorithm a configuration file names: a
// canonical name or an alias, case-sensitive.
func ParseAlgorithm(name string) (Algorithm, bool) {
	a, ok := fileNames[name]
	return a, ok
}

// ParseMethod returns the algorithm an x-routing-method value (or the method
// token of an expression) names: it trims spaces, lower-cases, turns '_'
// into '-' and accepts a canonical name or an alias
// (docs/design/hub-request.md#parse-order, step 4).
// It does not allocate, because it runs on every request that sends the
// header.
func ParseMethod(v string) (Algorithm, bool) {
	v = strings.TrimSpace(v)
	if len(v) > maxMethodLen {
		return 0, false
	}
	var buf [maxMethodLen]byte
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		buf[i] = c
	}
	a, ok := headerNames[string(buf[:len(v)])]
	return a, ok
}

// algSet is a set of algorithms, one bit each (bit 0 is unused: the zero
// Algorithm is "none").
type algSet uint16

func setOf(as ...Algorithm) algSet {
	var s algSet
	for _, a := range as {
		s |= 1 << a
	}
	return s
}

func (s algSet) has(a Algorithm) bool { return s&(1<<a) != 0 }

var allAlgorithms = setOf(algorithms[:]...)

// usesWaitAndWiden reports whether a is built on the wait-and-widen
// selector, and so has its settings.
func (a Algorithm) usesWaitAndWiden() bool { return a == WaitAndWiden || a == PulsarWaitAndWiden }

// usesPulsarRanking reports whether a ranks clusters by pulsar weights, which
// makes admission look only at clusters with a valid weight, the only ones
// such an algorithm can choose
// (docs/design/hub-request.md#input-work-admission).
func (a Algorithm) usesPulsarRanking() bool { return a == Pulsar || a == PulsarWaitAndWiden }
