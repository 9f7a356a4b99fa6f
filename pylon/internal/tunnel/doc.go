// Package tunnel is the pylon's end of the reverse tunnel: it dials every
// hub, proves who it is with a handshake, and then serves HTTP/2 on the
// connection it opened, so the hub can send it requests without ever
// dialing into the pylon's network (docs/protocol.md).
//
// Client keeps exactly one connection to every address a configured hub
// name resolves to (a Kubernetes headless Service lists every hub pod),
// re-resolves periodically, and reconnects each one with the jittered
// backoff of docs/pylon.md#hubs-and-the-tunnel. RegistrationHandler is the
// pylon side of the registration stream the hub reads over that
// connection.
//
// The package moves bytes and reports connection state; it does not decide
// what the pylon publishes (a Snapshotter does) or how a request is served
// (the http.Handler the agent provides does).
package tunnel
