package pulsar

import (
	"fmt"
	"testing"
)

// order lists f's keys oldest first by following the links.
func order(f *fifo) string {
	var keys []string
	for i := f.head; i != nilNode; i = f.nodes[i].next {
		keys = append(keys, f.nodes[i].key)
	}
	return fmt.Sprint(keys)
}

func TestFIFO(t *testing.T) {
	f := newFIFO(3)
	for _, k := range []string{"a", "b", "c"} {
		f.pushBack(k, []Ranked{{Index: int(k[0])}})
	}
	if !f.full() || f.len() != 3 || order(&f) != "[a b c]" {
		t.Fatalf("after three pushes: full=%v len=%d order=%s", f.full(), f.len(), order(&f))
	}
	if !f.remove("b") || f.remove("b") || order(&f) != "[a c]" || f.has("b") {
		t.Fatalf("remove from the middle: %s", order(&f))
	}
	f.pushBack("d", nil)
	if len(f.nodes) != 3 {
		t.Fatalf("a freed node was not reused: %d nodes", len(f.nodes))
	}
	f.popFront()
	if order(&f) != "[c d]" || f.has("a") {
		t.Fatalf("popFront: %s", order(&f))
	}
	if r, ok := f.get("c"); !ok || r[0].Index != 'c' {
		t.Fatalf("get(c) = %v, %v", r, ok)
	}
	f.remove("d")
	f.remove("c")
	f.popFront() // empty: no-op
	if f.len() != 0 || f.head != nilNode || f.tail != nilNode {
		t.Fatalf("emptied fifo: len %d head %d tail %d", f.len(), f.head, f.tail)
	}
	f.pushBack("e", nil)
	f.reset()
	if f.len() != 0 || order(&f) != "[]" || len(f.nodes) != 0 {
		t.Fatal("reset left entries")
	}
	f.pushBack("f", nil)
	if order(&f) != "[f]" {
		t.Fatalf("after reset: %s", order(&f))
	}
}
