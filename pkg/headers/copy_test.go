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
