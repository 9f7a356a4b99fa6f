// Package roundtrip sends a relay's upstream request on its transport
// directly, not through http.Client. A relay must hand an upstream
// redirect back as it came, as any reverse proxy does: http.Client would
// follow it, re-sending a POST's body (a prompt) to whatever URL the
// upstream named. Client also copies the whole request header on every
// request, for the redirects it might follow. What Client adds that a
// relay keeps is its error form, which this package reproduces so logs
// read the same.
package roundtrip
