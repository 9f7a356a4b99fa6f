package prefixhash

import (
	"errors"
	"strings"
	"testing"
)

// TestHeaderExample pins the wire format: version, block tokens, total
// blocks, then the checkpoint hashes as 8-byte big-endian base64url.
func TestHeaderExample(t *testing.T) {
	t.Parallel()
	s := Summarize([]uint64{0x0102030405060708, 0xfffefdfcfbfaf9f8, 0x1}, 16)
	const want = "2.16.3.AQIDBAUGBwj__v38-_r5-AAAAAAAAAAB"
	if got := FormatHeader(s); got != want {
		t.Fatalf("FormatHeader = %q, want %q", got, want)
	}
	p, err := ParseHeader(want)
	if err != nil || !equalSummary(p, s) {
		t.Fatalf("ParseHeader = %+v, %v; want %+v", p, err, s)
	}
	if FormatHeader(Summary{}) != "" {
		t.Fatal("an empty summary has a header")
	}
}

// TestMaxHeaderLen: the largest summary the bounds allow encodes to exactly
// MaxHeaderLen bytes and parses back.
func TestMaxHeaderLen(t *testing.T) {
	t.Parallel()
	s := Summarize(seqHashes(MaxTotalBlocks), MaxBlockTokens)
	h := FormatHeader(s)
	if len(h) != MaxHeaderLen {
		t.Fatalf("largest header is %d bytes, MaxHeaderLen %d", len(h), MaxHeaderLen)
	}
	if p, err := ParseHeader(h); err != nil || !equalSummary(p, s) {
		t.Fatalf("largest header does not round-trip: %v", err)
	}
}

func TestParseHeaderRejects(t *testing.T) {
	t.Parallel()
	good := FormatHeader(Summarize(seqHashes(3), 16)) // "2.16.3.<32 chars>"
	enc := good[strings.LastIndexByte(good, '.')+1:]
	tests := []struct {
		name, v string
		want    error
		msg     string
	}{
		{"empty", "", ErrInvalidHeader, "want <version>"},
		{"three fields", "1.16.3", ErrInvalidHeader, "want <version>"},
		{"previous version", "1.16.3." + enc, ErrUnknownVersion, "version 1 (this build knows 2)"},
		{"later version", "3.16.3." + enc, ErrUnknownVersion, "version 3"},
		// The envelope is checked before the version: a malformed value
		// is invalid whatever version it names.
		{"previous version malformed", "1.16.10.!!", ErrInvalidHeader, "hashes are 2 characters"},
		{"later version malformed", "3.16.3." + enc[1:], ErrInvalidHeader, "need 3 checkpoints"},
		{"version leading zero", "02.16.3." + enc, ErrInvalidHeader, "version \"02\" has a leading zero"},
		{"version sign", "+2.16.3." + enc, ErrInvalidHeader, "not a decimal"},
		{"block tokens zero", "2.0.3." + enc, ErrInvalidHeader, "block tokens \"0\""},
		{"block tokens leading zero", "2.016.3." + enc, ErrInvalidHeader, "leading zero"},
		{"block tokens too large", "2.1025.3." + enc, ErrInvalidHeader, "block tokens 1025 is above 1024"},
		{"block tokens negative", "2.-16.3." + enc, ErrInvalidHeader, "not a decimal"},
		{"block tokens space", "2. 16.3." + enc, ErrInvalidHeader, "not a decimal"},
		{"total blocks zero", "2.16.0.", ErrInvalidHeader, "total blocks \"0\""},
		{"total blocks empty", "2.16.." + enc, ErrInvalidHeader, "total blocks is empty"},
		{"total blocks too large", "2.16.16777217." + enc, ErrInvalidHeader, "above 16777216"},
		{"total blocks overflow", "2.16.99999999999999999999." + enc, ErrInvalidHeader, "too long"},
		{"too few hashes", "2.16.4." + enc, ErrInvalidHeader, "need 4 checkpoints"},
		{"too many hashes", "2.16.2." + enc, ErrInvalidHeader, "need 2 checkpoints"},
		{"padding", "2.16.1.AAAAAAAAAAA=", ErrInvalidHeader, "hashes are 12 characters"},
		{"standard alphabet", "2.16.1.AAAAAAAAA+A", ErrInvalidHeader, "base64url"},
		{"non-zero pad bits", "2.16.1.AAAAAAAAAAB", ErrInvalidHeader, "base64url"},
		{"newline", "2.16.1.AAAAAAAAAA\n", ErrInvalidHeader, "base64url"},
		{"extra dot", "2.16.1.AAAA.AAAAAA", ErrInvalidHeader, "base64url"},
		{"too long", "2.16.1." + strings.Repeat("A", MaxHeaderLen), ErrInvalidHeader, "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseHeader(tt.v)
			if !errors.Is(err, tt.want) {
				t.Fatalf("ParseHeader(%q) = %v, want %v", tt.v, err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("error %q does not say %q", err, tt.msg)
			}
		})
	}
}
