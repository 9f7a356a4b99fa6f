package prefixhash

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stargate-router/stargate/pkg/headers"
)

// TestAnchorKey: the key sits at the first checkpoint reaching
// AnchorBlocks, so prompts that agree up to there share it whatever
// follows, prompts that differ before it do not, and a short prompt
// anchors at its last checkpoint.
func TestAnchorKey(t *testing.T) {
	if got := AnchorKey(Summary{}); got != "" {
		t.Fatalf("AnchorKey of no summary = %q, want empty", got)
	}
	sum := func(blocks int, base uint64) Summary {
		hashes := make([]uint64, blocks)
		for i := range hashes {
			hashes[i] = base + uint64(i)
		}
		return Summarize(hashes, DefaultBlockTokens)
	}
	long, longer := sum(200, 1000), sum(1500, 1000)
	if AnchorKey(long) != AnchorKey(longer) {
		t.Errorf("prompts sharing their first %d blocks got keys %q and %q", AnchorBlocks, AnchorKey(long), AnchorKey(longer))
	}
	if AnchorKey(long) == AnchorKey(sum(200, 5000)) {
		t.Error("prompts differing from the first block share a key")
	}
	short := sum(5, 1000)
	if want := AnchorKeyPrefix + strconv.FormatUint(1004, 16); AnchorKey(short) != want {
		t.Errorf("5-block prompt: key %q, want its last checkpoint %q", AnchorKey(short), want)
	}
	if want := AnchorKeyPrefix + strconv.FormatUint(1000+AnchorBlocks-1, 16); AnchorKey(long) != want {
		t.Errorf("200-block prompt: key %q, want block 32's hash %q", AnchorKey(long), want)
	}
	if !strings.HasPrefix(AnchorKey(longer), AnchorKeyPrefix) {
		t.Error("key lacks its prefix")
	}
}

// TestInnerKey: a session key places the request inside its cluster; no key
// or a payload key (one request only) gives way to the prompt's anchor;
// without a summary the key stands.
func TestInnerKey(t *testing.T) {
	hashes := make([]uint64, 100)
	for i := range hashes {
		hashes[i] = uint64(i) + 1
	}
	s := Summarize(hashes, DefaultBlockTokens)
	for _, tc := range []struct{ key, want string }{
		{"mt:v1:session:abc", "mt:v1:session:abc"},
		{"", AnchorKey(s)},
		{headers.PayloadKeyPrefix + "ff", AnchorKey(s)},
	} {
		if got := InnerKey(tc.key, s); got != tc.want {
			t.Errorf("InnerKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	if got := InnerKey(headers.PayloadKeyPrefix+"ff", Summary{}); got != headers.PayloadKeyPrefix+"ff" {
		t.Errorf("no summary: %q", got)
	}
}

// AnchorHash is the checkpoint AnchorKey names.
func TestAnchorHash(t *testing.T) {
	if _, ok := AnchorHash(Summary{}); ok {
		t.Fatal("an empty summary has an anchor")
	}
	hashes := make([]uint64, 100)
	for i := range hashes {
		hashes[i] = uint64(i) + 1
	}
	for _, blocks := range []int{5, 32, 100} {
		s := Summarize(hashes[:blocks], DefaultBlockTokens)
		h, ok := AnchorHash(s)
		if !ok || AnchorKey(s) != AnchorKeyPrefix+strconv.FormatUint(h, 16) {
			t.Fatalf("%d blocks: AnchorHash %x %v, AnchorKey %q", blocks, h, ok, AnchorKey(s))
		}
		if want := uint64(min(blocks, AnchorBlocks)); h != want {
			t.Fatalf("%d blocks: anchor %d, want the hash of block %d", blocks, h, want)
		}
	}
}
