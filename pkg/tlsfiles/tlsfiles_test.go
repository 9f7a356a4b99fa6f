package tlsfiles

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir, cn string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certPath, keyPath = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	_ = os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certPath, keyPath
}

func handshake(t *testing.T, srv, cli *tls.Config) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := tls.Server(c, srv)
		_ = tc.Handshake()
		_, _ = io.Copy(io.Discard, tc)
		tc.Close()
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), cli)
	if err != nil {
		ln.Close()
		<-done
		return "", err
	}
	cn := c.ConnectionState().PeerCertificates[0].Subject.CommonName
	c.Close()
	<-done
	return cn, nil
}

func TestServerAndClient(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir, "first")
	srv, err := Server(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := Client(cert, false)
	if err != nil {
		t.Fatal(err)
	}
	if cn, err := handshake(t, srv, cli); err != nil || cn != "first" {
		t.Fatalf("handshake: %q %v", cn, err)
	}
	// Rotate the files: the next handshake serves the new certificate.
	selfSigned(t, dir, "second")
	cli2, _ := Client(cert, false)
	if cn, err := handshake(t, srv, cli2); err != nil || cn != "second" {
		t.Fatalf("after rotation: %q %v", cn, err)
	}
	// A client that trusts only the first certificate refuses the second.
	if _, err := handshake(t, srv, cli); err == nil {
		t.Fatal("a client trusting the old certificate accepted the new one")
	}
	insecure, _ := Client("", true)
	if _, err := handshake(t, srv, insecure); err != nil {
		t.Fatalf("insecure client: %v", err)
	}
}

func TestErrorsNameTheFlags(t *testing.T) {
	if _, err := Server("", "x"); err == nil || !strings.Contains(err.Error(), "--tls-cert-path") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Server("/nope", "/nope"); err == nil || !strings.Contains(err.Error(), "--tls-cert-path") {
		t.Fatalf("err = %v", err)
	}
	bad := filepath.Join(t.TempDir(), "ca.pem")
	_ = os.WriteFile(bad, []byte("not pem"), 0o600)
	if _, err := Client(bad, false); err == nil || !strings.Contains(err.Error(), "no PEM") {
		t.Fatalf("err = %v", err)
	}
}

// Listener serves TLS with both HTTP versions offered, and closes the
// listener it was given when the pair cannot be loaded.
func TestListener(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listener(ln, filepath.Join(dir, "missing.crt"), filepath.Join(dir, "missing.key")); err == nil {
		t.Fatal("a missing pair was accepted")
	}
	if _, err := ln.Accept(); err == nil {
		t.Fatal("the listener was left open after the error")
	}
}
