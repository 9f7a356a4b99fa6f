package headers

import "net/http"

// Set is a set of canonical header keys (see NewSet).
type Set map[string]struct{}

// NewSet returns names in canonical form as a Set, for CopyExcept. Build
// sets once: canonicalising allocates for lower-case names.
func NewSet(names ...string) Set {
	set := make(Set, len(names))
	for _, k := range names {
		set[http.CanonicalHeaderKey(k)] = struct{}{}
	}
	return set
}

// CopyExcept copies src into dst but for the keys in skip. It does what
// Header.Clone followed by one Header.Del per skipped name does, in one
// pass: Del canonicalises its argument on every call, and Clone copies
// values only to drop them. Like Clone, all copied values share one backing
// array, each capped so that an append to one key cannot overwrite the
// next. src's keys must be canonical, as they are in any header net/http
// parsed.
func CopyExcept(dst, src http.Header, skip Set) { CopyExceptAs(dst, src, skip, nil) }

// CopyExceptAs is CopyExcept filing each key of src that as maps under
// its value instead: a relay that writes HTTP/2 files names in lower case,
// the form the wire carries, which x/net would otherwise make with an
// allocation per name and request. Such keys are not canonical: the
// result must be read through them, never with Header.Get.
func CopyExceptAs(dst, src http.Header, skip Set, as map[string]string) {
	nv := 0
	for k, vs := range src {
		if _, ok := skip[k]; !ok {
			nv += len(vs)
		}
	}
	sv := make([]string, nv)
	for k, vs := range src {
		if _, ok := skip[k]; ok {
			continue
		}
		if a, ok := as[k]; ok {
			k = a
		}
		if vs == nil {
			dst[k] = nil
			continue
		}
		n := copy(sv, vs)
		dst[k] = sv[:n:n]
		sv = sv[n:]
	}
}

// ShareExcept sets every key of src but those in skip on dst with src's
// value slices, not copies: for a src that is read and dropped (an
// upstream response head) and a dst whose writer copies the values when
// it sends them, the copy CopyExcept makes is an array per response for
// nothing. dst's keys must only be replaced (Set), never appended to; a
// parsed header's value slices are capped, so an append would not write
// into src anyway. src's keys must be canonical.
func ShareExcept(dst, src http.Header, skip Set) {
	for k, vs := range src {
		if _, ok := skip[k]; !ok {
			dst[k] = vs
		}
	}
}

// First is h.Get(key) for a key already in canonical form, which Get would
// canonicalise again (allocating for a lower-case name) on every call.
func First(h http.Header, key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}
