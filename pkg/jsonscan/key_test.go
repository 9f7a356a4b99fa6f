package jsonscan

import "testing"

func TestKeyIs(t *testing.T) {
	for _, tc := range []struct {
		k, name string
		want    bool
	}{
		{"content", "content", true},
		{"Content", "content", true},
		{"OUTPUT_TOKENS_SO_FAR", "output_tokens_so_far", true},
		{"contents", "content", false},
		{"conten", "content", false},
		{"cont_nt", "content", false},
		{"@ontent", "`ontent", false}, // only letters fold
		{"", "", true},
	} {
		if got := KeyIs([]byte(tc.k), tc.name); got != tc.want {
			t.Errorf("KeyIs(%q, %q) = %v, want %v", tc.k, tc.name, got, tc.want)
		}
	}
}

func TestASCII(t *testing.T) {
	for k, want := range map[string]bool{"choices": true, "": true, "choiceſ": false, "\x7f": true, "\x80": false} {
		if got := ASCII([]byte(k)); got != want {
			t.Errorf("ASCII(%q) = %v, want %v", k, got, want)
		}
	}
}
