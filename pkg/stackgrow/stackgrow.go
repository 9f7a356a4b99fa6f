package stackgrow

// To8KiB grows the calling goroutine's stack to 8 KiB, unless it is that
// large already. The pylon's inference requests reach 8 KiB (net/http's
// Transport.roundTrip to the engine).
//
//go:noinline
func To8KiB() {
	var frame [6 << 10]byte
	touch(frame[:])
}

// To16KiB grows the calling goroutine's stack to 16 KiB, unless it is
// that large already. The gateway's requests reach 16 KiB (encoding/json
// decoding the usage of an answer, below the handler's middleware).
//
//go:noinline
func To16KiB() {
	var frame [12 << 10]byte
	touch(frame[:])
}

// touch keeps a frame from being optimised away without letting it escape
// to the heap.
//
//go:noinline
func touch([]byte) {}
