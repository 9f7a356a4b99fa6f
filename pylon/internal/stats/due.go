package stats

import "time"

// dueCheck is one entry of the request memory and when the sweep is next
// to look at it. t tells a check for the entry that is in the memory now
// from one for an older request with the same id.
type dueCheck struct {
	at time.Time
	id string
	t  *reqTrack
}

// dueHeap is a binary min-heap of checks by at. It is container/heap's
// algorithm on the concrete type, which pushes without boxing each check
// in an interface (an allocation per request).
type dueHeap []dueCheck

func (h *dueHeap) push(d dueCheck) {
	*h = append(*h, d)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !s[i].at.Before(s[p].at) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

// pop removes and returns the earliest check; h must not be empty.
func (h *dueHeap) pop() dueCheck {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s[last] = dueCheck{} // drop the references for the collector
	s = s[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(s) {
			break
		}
		m := l
		if r := l + 1; r < len(s) && s[r].at.Before(s[l].at) {
			m = r
		}
		if !s[m].at.Before(s[i].at) {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
	return top
}
