package olricnode

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestDiscoverDropsItself: a headless Service's answer includes the
// asking pod; Olric refuses to start with itself as a peer, so discovery
// drops every address that names this node (bind, advertise, interface
// addresses, in any spelling of the IP) and keeps the others.
func TestDiscoverDropsItself(t *testing.T) {
	cfg := Config{K8sService: "gw-olric", MemberlistBindPort: 3322, MemberlistBindAddr: "0.0.0.0",
		MemberlistAdvertiseAddr: "10.0.0.5", MaxJoinAttempts: 3, JoinRetry: time.Second,
		Resolve: func(context.Context, string) ([]string, error) {
			return []string{"10.0.0.5", "10.0.0.6", "fd00::0001", "10.0.0.7"}, nil
		},
		LocalAddrs: func() ([]net.Addr, error) {
			return []net.Addr{&net.IPNet{IP: net.ParseIP("fd00::1"), Mask: net.CIDRMask(64, 128)}}, nil
		},
	}
	peers, err := discover(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.6:3322", "10.0.0.7:3322"}; !slices.Equal(peers, want) {
		t.Fatalf("peers %v, want %v", peers, want)
	}
}

// TestDiscoverAloneWaitsForOthers: an answer naming only this node is no
// peer at all: discovery asks again until its attempts run out (so pods
// started together find each other instead of each forming a cluster),
// then starts alone.
func TestDiscoverAloneWaitsForOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		cfg := Config{K8sService: "gw-olric", MemberlistBindPort: 3322, MaxJoinAttempts: 3, JoinRetry: time.Second,
			Resolve: func(context.Context, string) ([]string, error) {
				calls++
				return []string{"10.1.1.1"}, nil
			},
			LocalAddrs: func() ([]net.Addr, error) {
				return []net.Addr{&net.IPNet{IP: net.ParseIP("10.1.1.1"), Mask: net.CIDRMask(24, 32)}}, nil
			},
		}
		start := time.Now()
		peers, err := discover(context.Background(), cfg, slog.New(slog.DiscardHandler))
		if err != nil || peers != nil {
			t.Fatalf("peers %v, err %v; want none, nil", peers, err)
		}
		if calls != 3 || time.Since(start) != 2*time.Second {
			t.Fatalf("%d lookups over %v, want 3 over 2s", calls, time.Since(start))
		}
	})
}

// TestDiscoverStaticPeersWin: static peers are used as given, without a
// lookup.
func TestDiscoverStaticPeersWin(t *testing.T) {
	cfg := Config{K8sService: "gw-olric", Peers: []string{"10.0.0.9:3322"},
		Resolve: func(context.Context, string) ([]string, error) {
			t.Fatal("resolved although static peers are set")
			return nil, nil
		}}
	peers, err := discover(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil || !slices.Equal(peers, []string{"10.0.0.9:3322"}) {
		t.Fatalf("peers %v, err %v", peers, err)
	}
}
