package prefixhash

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The header encoding of a Summary is four fields joined by '.':
//
//	<Version>.<BlockTokens>.<TotalBlocks>.<hashes>
//
// the numbers in canonical decimal (no sign, no leading zero) and the
// checkpoint hashes as 8 bytes big-endian each, concatenated and encoded
// base64url without padding. Stride is not sent: it follows from
// TotalBlocks (StrideFor), and so does the number of hashes, which the
// parser checks. '.' is outside the base64url alphabet, so the fields split
// unambiguously, and every Summary has exactly one encoding.
//
// That envelope, bounds and hash count included, is the same in every
// Version: a version says how the hashes were computed, not how they are
// written. A value that breaks the envelope is therefore invalid whatever
// version it names, and ErrUnknownVersion means exactly a well-formed
// summary from a build that hashes another way, which is what a gateway of
// another release sends during a rolling upgrade.

// maxHashChars is the base64url length of MaxCheckpoints hashes.
const maxHashChars = (MaxCheckpoints*8*8 + 5) / 6

// MaxHeaderLen bounds the header's length in bytes: the version, a 4-digit
// block size, an 8-digit block count, three dots and 64 hashes (683
// characters). A hub refuses anything longer before looking at it.
const MaxHeaderLen = 1 + 1 + 4 + 1 + 8 + 1 + maxHashChars

// hashEncoding is strict so that non-zero padding bits, which would give a
// second spelling of the same hashes, are refused.
var hashEncoding = base64.RawURLEncoding.Strict()

var (
	// ErrInvalidHeader is wrapped by every error ParseHeader returns for a
	// malformed value.
	ErrInvalidHeader = errors.New("invalid prompt prefix header")
	// ErrUnknownVersion is wrapped by ParseHeader's error for a value that
	// is well formed but names a version other than Version: a summary
	// another implementation made, which a hub ignores rather than counts
	// as a client error.
	ErrUnknownVersion = errors.New("unknown prompt prefix version")
)

// FormatHeader returns the header value of s, "" for an empty summary (the
// gateway then sends no header). s must be what Summarize, a Hasher or
// ParseHeader produced.
func FormatHeader(s Summary) string {
	if s.Empty() {
		return ""
	}
	return string(appendHeader(make([]byte, 0, MaxHeaderLen), s.BlockTokens, s.TotalBlocks, s.Hashes))
}

func appendHeader(dst []byte, blockTokens, totalBlocks int, hashes []uint64) []byte {
	dst = strconv.AppendInt(dst, Version, 10)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, int64(blockTokens), 10)
	dst = append(dst, '.')
	dst = strconv.AppendInt(dst, int64(totalBlocks), 10)
	dst = append(dst, '.')
	var raw [MaxCheckpoints * 8]byte
	for i, h := range hashes {
		binary.BigEndian.PutUint64(raw[i*8:], h)
	}
	return hashEncoding.AppendEncode(dst, raw[:len(hashes)*8])
}

// ParseHeader decodes a header value strictly: it accepts only what
// FormatHeader produces, so a summary has one spelling and a parsed value
// re-encodes to the same string. The error says which field is wrong and
// wraps ErrInvalidHeader, or ErrUnknownVersion when the only thing wrong
// is the version.
func ParseHeader(v string) (Summary, error) {
	if len(v) > MaxHeaderLen {
		return Summary{}, fmt.Errorf("%w: %d bytes, longer than the %d allowed", ErrInvalidHeader, len(v), MaxHeaderLen)
	}
	ver, rest, ok1 := strings.Cut(v, ".")
	bt, rest, ok2 := strings.Cut(rest, ".")
	tb, enc, ok3 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || !ok3 {
		return Summary{}, fmt.Errorf("%w: want <version>.<block tokens>.<total blocks>.<hashes>", ErrInvalidHeader)
	}
	version, err := canonicalUint(ver, "version", 1<<20)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{Version: Version}
	if s.BlockTokens, err = canonicalUint(bt, "block tokens", MaxBlockTokens); err != nil {
		return Summary{}, err
	}
	if s.TotalBlocks, err = canonicalUint(tb, "total blocks", MaxTotalBlocks); err != nil {
		return Summary{}, err
	}
	s.Stride = StrideFor(s.TotalBlocks)
	want := Checkpoints(s.TotalBlocks, s.Stride)
	if n := hashEncoding.EncodedLen(want * 8); len(enc) != n {
		return Summary{}, fmt.Errorf("%w: hashes are %d characters; %d total blocks at stride %d need %d checkpoints, %d characters",
			ErrInvalidHeader, len(enc), s.TotalBlocks, s.Stride, want, n)
	}
	var raw [MaxCheckpoints * 8]byte
	var src [maxHashChars]byte
	n, err := hashEncoding.Decode(raw[:], src[:copy(src[:], enc)])
	// The decoder skips '\r' and '\n'; with the length already checked,
	// a skipped character shows as a short result.
	if err != nil || n != want*8 {
		return Summary{}, fmt.Errorf("%w: hashes are not canonical unpadded base64url of %d bytes", ErrInvalidHeader, want*8)
	}
	// Last, so that ErrUnknownVersion always means a well-formed summary.
	if version != Version {
		return Summary{}, fmt.Errorf("%w: version %d (this build knows %d)", ErrUnknownVersion, version, Version)
	}
	s.Hashes = make([]uint64, want)
	for i := range s.Hashes {
		s.Hashes[i] = binary.BigEndian.Uint64(raw[i*8:])
	}
	return s, nil
}

// canonicalUint parses a decimal in 1..hi written without sign, leading
// zero or anything but digits.
func canonicalUint(s, field string, hi int) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: %s is empty", ErrInvalidHeader, field)
	}
	if len(s) > 9 {
		return 0, fmt.Errorf("%w: %s %.12q is too long", ErrInvalidHeader, field, s)
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: %s %q is not a decimal number", ErrInvalidHeader, field, s)
		}
		n = n*10 + int(c-'0')
	}
	if s[0] == '0' {
		return 0, fmt.Errorf("%w: %s %q has a leading zero or is zero", ErrInvalidHeader, field, s)
	}
	if n > hi {
		return 0, fmt.Errorf("%w: %s %d is above %d", ErrInvalidHeader, field, n, hi)
	}
	return n, nil
}
