package engineproxy

// handlerStack is the frame growStack reserves: with the few frames above
// it, it makes the goroutine's stack 8 KiB, which an inference request's
// path through the engine transport (net/http's Transport.roundTrip under
// handle, forward, dispatch and send) needs.
const handlerStack = 6 << 10

// growStack grows the calling goroutine's stack to what an inference
// request needs now, while the goroutine is a few frames deep.
//
// The tunnel's HTTP/2 server runs each request on a new goroutine, and a
// new goroutine starts with the runtime's average stack size, which a
// relay's many shallow goroutines keep small. So every request grew its
// stack midway, inside Transport.roundTrip, where the runtime's copy
// adjusts some twenty frames: 5.9 % of the pylon's CPU in a profile under
// the chain at 1 KiB and 32 clients. Grown here the copy is of four
// frames, and the stack ends at the 8 KiB the request grew it to anyway,
// so no goroutine is larger than before. A goroutine that starts big
// enough does not grow at all.
//
//go:noinline
func growStack() {
	var frame [handlerStack]byte
	touchFrame(frame[:])
}

// touchFrame keeps growStack's frame from being optimised away without
// letting it escape to the heap.
//
//go:noinline
func touchFrame([]byte) {}
