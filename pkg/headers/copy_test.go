package headers

import (
	"net/http"
	"slices"
	"testing"
)

func TestCopyExcept(t *testing.T) {
	src := http.Header{"A": {"1", "2"}, "B": {"3"}, "X-Stargate-Retryable": {"true"}, "Nil": nil}
	dst := http.Header{}
	CopyExcept(dst, src, NewSet("x-stargate-retryable", "c"))
	if len(dst) != 3 || !slices.Equal(dst["A"], []string{"1", "2"}) || !slices.Equal(dst["B"], []string{"3"}) {
		t.Fatalf("copied %v", dst)
	}
	if v, ok := dst["Nil"]; !ok || v != nil {
		t.Fatalf("a nil value must stay nil and present: %v %v", v, ok)
	}
	// Values are copied and capped: appending to one key leaves the next
	// and the source alone.
	dst["A"] = append(dst["A"], "x")
	dst["B"][0] = "changed"
	if !slices.Equal(src["A"], []string{"1", "2"}) || src["B"][0] != "3" {
		t.Fatalf("source changed: %v", src)
	}
	if First(src, "A") != "1" || First(src, "Missing") != "" {
		t.Fatal("First")
	}
}

func TestCopyExceptAs(t *testing.T) {
	// The lower-case key the relay files the name under (a variable:
	// a literal non-canonical key is what linters rightly flag elsewhere).
	lower := "x-request-id"
	src := http.Header{"X-Request-Id": {"r1"}, "B": {"3"}, "Host": {"h"}}
	dst := http.Header{}
	CopyExceptAs(dst, src, NewSet("host"), map[string]string{"X-Request-Id": lower})
	if len(dst) != 2 || !slices.Equal(dst[lower], []string{"r1"}) || !slices.Equal(dst["B"], []string{"3"}) {
		t.Fatalf("copied %v", dst)
	}
	if _, ok := dst["X-Request-Id"]; ok {
		t.Fatalf("a renamed key must not also stay under its canonical name: %v", dst)
	}
	dst[lower][0] = "changed"
	if src["X-Request-Id"][0] != "r1" {
		t.Fatalf("values must be copied: source changed to %v", src)
	}
}

func TestShareExcept(t *testing.T) {
	src := http.Header{"A": {"1"}, "Skip": {"s"}}
	dst := http.Header{"A": {"old"}, "Kept": {"k"}}
	ShareExcept(dst, src, NewSet("skip"))
	if len(dst) != 2 || dst["A"][0] != "1" || dst["Kept"][0] != "k" {
		t.Fatalf("shared %v", dst)
	}
	// Shared, not copied: the same backing array.
	if &dst["A"][0] != &src["A"][0] {
		t.Fatal("ShareExcept copied a value slice")
	}
}
