package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and its key.
func writeCert(t *testing.T, dir string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certPath, keyPath
}

// testTLSAndToken runs the tunnel over TLS with a registration token: a
// pylon with the CA and the token registers and serves; one with a wrong
// token and one speaking plaintext never register, and the hub says why.
func testTLSAndToken(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	token := filepath.Join(dir, "token")
	wrong := filepath.Join(dir, "wrong")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wrong, []byte("guess\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := e.hub("--tls-cert-path", cert, "--tls-key-path", key, "--registration-token-file", token)
	good := e.pylon(h, e.mock(), "pylon-tls", "--tls-cert-path", cert, "--auth-token-file", token)
	e.pylon(h, e.mock(), "pylon-wrong-token", "--tls-cert-path", cert, "--auth-token-file", wrong)
	// A plaintext pylon that was told the path is trusted still cannot
	// register with a TLS hub: the handshake fails before any token is read.
	e.pylon(h, e.mock(), "pylon-plaintext", "--auth-token-file", token, "--insecure-plaintext")
	e.waitRegistered(h, good)

	resp, err := h.send(t.Context(), e.cl, chat{Content: promptOf(64), OutputTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("x-stargate-cluster-id") != "pylon-tls" {
		t.Fatalf("request over the TLS tunnel: status %d cluster %q", resp.StatusCode, resp.Header.Get("x-stargate-cluster-id"))
	}
	// Both refused pylons have retried by now (backoff starts at 1 s).
	waitFor(t, 5*time.Second, "the hub to refuse the wrong token", func() (bool, string) {
		return strings.Contains(h.tail(), "pylon-wrong-token"), "no refusal logged yet"
	})
	st, err := h.state(e.cl)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range st.Sessions {
		ids = append(ids, s.ID)
	}
	if !slices.Equal(ids, []string{"pylon-tls"}) {
		t.Fatalf("sessions = %v, want only pylon-tls", ids)
	}
	if strings.Contains(h.tail(), "s3cret") || strings.Contains(h.tail(), "guess") {
		t.Fatal("the hub logged a token")
	}
}
