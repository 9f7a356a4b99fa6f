package routing

import "testing"

func TestRequestIsExcluded(t *testing.T) {
	for _, tc := range []struct {
		excluded []string
		id       string
		want     bool
	}{
		{nil, "a", false},
		{[]string{}, "", false},
		{[]string{"a", "b"}, "b", true},
		{[]string{"a", "b"}, "c", false},
		{[]string{""}, "", true}, // ids are compared exactly
		{[]string{"A"}, "a", false},
	} {
		r := Request{Excluded: tc.excluded}
		if got := r.IsExcluded(tc.id); got != tc.want {
			t.Errorf("%v.IsExcluded(%q) = %v, want %v", tc.excluded, tc.id, got, tc.want)
		}
	}
}
