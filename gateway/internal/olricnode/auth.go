package olricnode

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
)

// MinSecretBytes is the shortest shared secret accepted: the secret keys
// the gossip encryption as well as the data port's password, and 32
// random bytes' worth of text (openssl rand -hex 32 gives 64 characters)
// is out of reach of guessing over the network.
const MinSecretBytes = 32

// The labels that derive the two keys from the shared secret. Changing
// either splits a rolling update into two clusters, like a new secret.
const (
	passwordLabel  = "stargate olric data password v1"
	gossipKeyLabel = "stargate olric memberlist key v1"
)

// Password is the AUTH password of the data (RESP) port derived from the
// shared secret: HMAC-SHA256(secret, "stargate olric data password v1")
// in lower-case hex. Olric sends it in clear text at the start of every
// connection, so it is derived rather than the secret itself: whoever
// captures it learns nothing of the gossip key. Operators reproduce it
// with openssl to talk to a node by hand (docs/gateway.md#olric-authentication).
func Password(secret string) string {
	return hex.EncodeToString(derive(secret, passwordLabel))
}

// gossipKey is memberlist's AES-256 key derived from the shared secret;
// memberlist then drops every gossip packet and stream not sealed with it.
func gossipKey(secret string) []byte { return derive(secret, gossipKeyLabel) }

func derive(secret, label string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	return m.Sum(nil)
}

// Exposure says why the node is more than a lone member on loopback, or
// "" when it is one (only processes of this host can reach it: the
// default, a laptop). A member with peers or discovery must be reached
// by other processes, even when they share the host's loopback; one with
// a listener or advertised address off loopback can be reached from
// other hosts. Such a node needs the shared secret, since anyone who
// reaches its ports could otherwise rewrite rate-limit counters and
// last-cluster hints, or join as a member and receive them.
func (c Config) Exposure() string {
	var why []string
	if len(c.Peers) > 0 {
		why = append(why, "peers are configured")
	}
	if c.K8sService != "" {
		why = append(why, "Kubernetes discovery is configured")
	}
	for _, a := range []struct{ name, addr string }{
		{"data listener", c.BindAddr}, {"memberlist listener", c.MemberlistBindAddr}, {"advertised address", c.MemberlistAdvertiseAddr},
	} {
		if a.addr != "" && !IsLoopback(a.addr) {
			why = append(why, fmt.Sprintf("the %s is %s", a.name, a.addr))
		}
	}
	return strings.Join(why, ", ")
}

// IsLoopback reports whether host (an IP address or "localhost") names
// this host's loopback only.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
