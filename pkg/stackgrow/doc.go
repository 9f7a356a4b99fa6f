// Package stackgrow grows a request goroutine's stack while it is still
// shallow, to the size the request will reach anyway.
//
// An HTTP/2 server (the gateway's for TLS clients, the pylon's tunnel)
// runs every request on a new goroutine, and a new goroutine starts with
// the runtime's average stack size, which a relay's many shallow
// goroutines keep small. A request that outgrows it midway has its stack
// copied there, and the copy walks and adjusts every frame above it:
// twenty to thirty-five frames in the tiers' profiles, a few per cent of
// their CPU. Growing the stack first thing, a few frames deep, makes that
// copy short and leaves the stack exactly as large as it would have
// become.
//
// Call the function of the size the request reaches, as near the top of
// the goroutine as possible: its frame is three quarters of that size, so
// it grows a smaller stack to the size (the frames above it and the
// runtime's guard fit in the rest) and never past it. A goroutine whose
// stack is already that large (an HTTP/1 connection's, after its first
// request) only pays for clearing the frame, about 0.1 µs.
package stackgrow
