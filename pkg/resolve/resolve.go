package resolve

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
)

// Resolver looks up the addresses of a host name. *net.Resolver satisfies
// it; tests inject their own.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Lookup returns the addresses of host through r. An IP literal resolves
// to itself without a lookup. A positive timeout bounds the lookup on clk,
// so tests drive it without waiting; 0 leaves it to ctx. An answer without
// any address is an error: a caller would otherwise drop every peer it had
// for a name that resolves to nothing for a moment.
func Lookup(ctx context.Context, clk clock.Clock, r Resolver, host string, timeout time.Duration) ([]string, error) {
	if net.ParseIP(host) != nil {
		return []string{host}, nil
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		t := clk.AfterFunc(timeout, cancel)
		defer func() {
			t.Stop()
			cancel()
		}()
	}
	ips, err := r.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no addresses for %q", host)
	}
	return ips, nil
}
