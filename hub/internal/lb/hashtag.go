package lb

import "encoding/binary"

// AppendTag appends tag(t, v) = t ‖ 0xFF ‖ u64-little-endian(len(v)) ‖ v,
// the field encoding of every affinity hash (pulsar ranking, the
// wait-and-widen ring). Length-prefixing keeps different field lists from
// producing the same bytes. The layout is byte for byte upstream Stargate's,
// so that every hub replica, and an upstream hub, sends a key to the same
// cluster (docs/design/algorithms.md#hashing).
func AppendTag(dst []byte, t, v string) []byte {
	dst = append(dst, t...)
	dst = append(dst, 0xFF)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(len(v)))
	return append(dst, v...)
}
