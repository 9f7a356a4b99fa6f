package lb

import (
	"errors"
	"fmt"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// Comparator scores clusters for a request; lower is better. The zero value is
// ComparatorTTFT, the default of every algorithm that takes a comparator.
type Comparator uint8

// The comparators (docs/design/algorithms.md#comparators). Their names
// (String, ParseComparator) are the lb-config.json contract.
const (
	// ComparatorTTFT scores by TTFTMs: RTT + queue + prefill, always in full.
	ComparatorTTFT Comparator = iota
	// ComparatorQueueTime scores by QueueMs.
	ComparatorQueueTime
	// ComparatorInputWorkSeconds scores by InputWorkSeconds.
	ComparatorInputWorkSeconds
	// ComparatorUtilization scores by Utilization.
	ComparatorUtilization
	// ComparatorNumRequestsQueued scores by queue_size, compared as an
	// integer; pending reservations are included.
	ComparatorNumRequestsQueued
	numComparators
)

var comparatorNames = [numComparators]string{
	ComparatorTTFT:              "ttft",
	ComparatorQueueTime:         "queue-time",
	ComparatorInputWorkSeconds:  "input-work-seconds",
	ComparatorUtilization:       "utilization",
	ComparatorNumRequestsQueued: "num-requests-queued",
}

// ErrUnknownComparator is wrapped by ParseComparator and UnmarshalText for a
// name that is not a comparator.
var ErrUnknownComparator = errors.New("unknown comparator")

// ParseComparator returns the comparator with exactly this name. Names are
// case-sensitive, as everywhere in lb-config.json.
func ParseComparator(name string) (Comparator, error) {
	for c, n := range comparatorNames {
		if n == name {
			return Comparator(c), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want one of ttft, queue-time, input-work-seconds, utilization, num-requests-queued)",
		ErrUnknownComparator, name)
}

// Valid reports whether c is one of the defined comparators.
func (c Comparator) Valid() bool { return c < numComparators }

// String returns the comparator's configuration name.
func (c Comparator) String() string {
	if c.Valid() {
		return comparatorNames[c]
	}
	return fmt.Sprintf("Comparator(%d)", uint8(c))
}

// MarshalText returns the comparator's configuration name.
func (c Comparator) MarshalText() ([]byte, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("invalid comparator %d", uint8(c))
	}
	return []byte(comparatorNames[c]), nil
}

// UnmarshalText parses a configuration name with ParseComparator, so a
// Comparator can be decoded straight from JSON.
func (c *Comparator) UnmarshalText(b []byte) error {
	v, err := ParseComparator(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// Score is a comparator's score of one cluster. Scores from the same
// comparator compare with Score.Compare; keeping the best Score around saves
// recomputing it for every comparison.
type Score struct {
	f     float64
	n     uint64
	isInt bool
}

// Float returns the score as a float64, for logs (an integer score above 2^53
// loses precision here, never in Compare).
func (s Score) Float() float64 {
	if s.isInt {
		return float64(s.n)
	}
	return s.f
}

// Compare returns -1, 0 or +1 as s is better than, as good as, or worse than
// o. Float scores use total ordering, so +Inf is worse than every finite
// score.
func (s Score) Compare(o Score) int {
	if s.isInt {
		return compareUint64(s.n, o.n)
	}
	return TotalCompare(s.f, o.f)
}

// Score scores cluster v for req. An invalid comparator scores like ttft.
func (c Comparator) Score(req *routing.Request, v *routing.ClusterView) Score {
	s := &v.Stats
	switch c {
	case ComparatorQueueTime:
		return Score{f: ViewQueueMs(v, req.Priority)}
	case ComparatorInputWorkSeconds:
		return Score{f: InputWorkSeconds(s, req.InputTokens)}
	case ComparatorUtilization:
		return Score{f: Utilization(s)}
	case ComparatorNumRequestsQueued:
		return Score{n: s.QueueSize, isInt: true}
	default:
		return Score{f: TTFTMs(v, req.InputTokens, req.Priority)}
	}
}

// Compare returns -1, 0 or +1 as cluster a is better than, as good as, or
// worse than cluster b for req.
func (c Comparator) Compare(req *routing.Request, a, b *routing.ClusterView) int {
	return c.Score(req, a).Compare(c.Score(req, b))
}
