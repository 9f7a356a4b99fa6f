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
	"errors"
	"flag"
	"fmt"
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
	rp := httputil.NewSingleHostReverseProxy(u)
	// Keep enough idle connections for the load tool's concurrency, as
	// the hub's and pylon's clients do; the default of 2 per host would
	// measure connection setup instead of relaying.
	rp.Transport = &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}
	srv := &http.Server{Addr: *listen, Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
