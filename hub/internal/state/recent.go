package state

import (
	"container/list"

	"github.com/stargate-router/stargate/hub/internal/routing"
)

// DefaultRememberedTargets is how many listed targets Known remembers. A
// hub serves tens to hundreds of models; ten thousand leaves room for
// many routing keys while bounding the memory to a few megabytes.
const DefaultRememberedTargets = 10000

// maxRememberedKeyBytes caps the routing key and model id of a remembered
// target together: with DefaultRememberedTargets it bounds the set at
// about 5 MB of keys, whatever the pylons send.
const maxRememberedKeyBytes = 512

// recent is a set of targets bounded to cap entries that forgets the least
// recently added one first. It is not safe for concurrent use.
type recent struct {
	cap   int
	order *list.List // of routing.Target, most recent at the front
	index map[routing.Target]*list.Element
}

func newRecent(limit int) *recent {
	return &recent{cap: limit, order: list.New(), index: map[routing.Target]*list.Element{}}
}

// add inserts t, or marks it the most recent when present, and forgets the
// oldest entry beyond the cap.
func (r *recent) add(t routing.Target) {
	if e, ok := r.index[t]; ok {
		r.order.MoveToFront(e)
		return
	}
	r.index[t] = r.order.PushFront(t)
	if r.order.Len() > r.cap {
		oldest := r.order.Back()
		r.order.Remove(oldest)
		delete(r.index, oldest.Value.(routing.Target))
	}
}

func (r *recent) contains(t routing.Target) bool {
	_, ok := r.index[t]
	return ok
}

func (r *recent) len() int { return r.order.Len() }
