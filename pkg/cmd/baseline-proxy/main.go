// Command baseline-proxy is the yardstick for the spine's added latency: a
// bare net/http/httputil reverse proxy with no routing, no tunnel and no
// observation. Two of them chained in front of a mock engine
// (scripts/bench-spine.sh) measure what any two Go HTTP hops cost on the
// machine at hand, so the hub + pylon numbers can be read against the
// machine's floor instead of against zero.
//
//	baseline-proxy --listen 127.0.0.1:18101 --target http://127.0.0.1:18090
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "baseline-proxy:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("baseline-proxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:18101", "address to serve on")
	target := fs.String("target", "", "base URL every request is forwarded to (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	u, err := url.Parse(*target)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("--target: want an absolute http URL, got %q", *target)
	}
	srv := &http.Server{Addr: *listen, Handler: relay(u), ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// maxBody bounds a request body the relay buffers, as the hub's
// --proxy-max-replay-body-bytes does.
const maxBody = 64 << 20

// relay is the bare reverse proxy to u. It reads each request body whole
// before forwarding it, as the hub and the gateway do: streaming it
// through instead leaves the transport still reading the inbound body
// (to see its end) when the answer's head is flushed to the client, the
// HTTP/1 server then closes that body, and the transport takes the failed
// read for a broken connection and drops the engine's answer mid-stream
// (0.2-7.4 % of one client's streams were cut that way).
func relay(u *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(u)
	// Keep enough idle connections for the load tool's concurrency, as
	// the hub's and pylon's clients do; the default of 2 per host would
	// measure connection setup instead of relaying.
	rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
		rp.ServeHTTP(w, r)
	})
}
