package jsonscan

import "unicode/utf8"

// ASCII reports whether b, a key as written between its quotes, is all
// ASCII. encoding/json folds some non-ASCII letters onto ASCII ones when
// it matches keys to fields (the Kelvin sign onto k, the long s onto s),
// so a caller matching by KeyIs hands a non-ASCII key, like one with an
// escape, to encoding/json or treats it as doubt.
func ASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// KeyIs reports whether the ASCII key k names the field name, which is
// lower case, as encoding/json matches them: equal under ASCII case
// folding.
func KeyIs(k []byte, name string) bool {
	if len(k) != len(name) {
		return false
	}
	for i, c := range k {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}
