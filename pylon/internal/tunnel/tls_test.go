package tunnel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stargate-router/stargate/pkg/clock"
	"github.com/stargate-router/stargate/pkg/protocol"
)

// selfSigned returns a server TLS config for the name hub.test and a pool
// that trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "hub.test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		DNSNames:     []string{"hub.test"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS13}, pool
}

// TestTLSVerifiesTheConfiguredHostName dials a resolved IP but verifies the
// certificate against the configured host name, and sends the token inside
// TLS.
func TestTLSVerifiesTheConfiguredHostName(t *testing.T) {
	clk := clock.NewFake(epoch)
	serverTLS, pool := selfSigned(t)
	ln := listen(t, "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	hub := startTestHub(t, tls.NewListener(ln, serverTLS), func(_ int, hs protocol.Handshake) protocol.HandshakeAck { return accept(hs) })
	res := &staticResolver{}
	res.set("127.0.0.1")
	rc := startClient(t, Config{
		Addresses: []string{net.JoinHostPort("hub.test", port)}, Resolver: res, Clock: clk,
		TLS:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13},
		Handler: pylonHandler(newSnapshot("p1"), clk, nil),
		// With TLS the token needs no AllowPlaintextToken.
		Token: func() (string, error) { return "s3cret", nil },
	}, hub)
	hc := recv(t, hub.conns, "a TLS connection")
	if !hc.ack.Accepted || hc.hs.AuthToken != "s3cret" {
		t.Fatalf("ack %+v, token %q", hc.ack, hc.hs.AuthToken)
	}
	resp, err := hc.get(t, "/echo")
	if err != nil {
		t.Fatalf("request over TLS: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "echo /echo" {
		t.Fatalf("got %q", b)
	}
	if ev := recv(t, rc.states, "connected"); !ev.connected {
		t.Fatalf("OnState %+v", ev)
	}
}
