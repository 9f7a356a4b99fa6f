package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/gateway/internal/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCA is a certificate authority for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue writes a certificate for 127.0.0.1 with serial, signed by the CA,
// and its key to certPath and keyPath (replacing what was there).
func (ca *testCA) issue(t *testing.T, serial int64, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: fmt.Sprintf("gateway-%d", serial)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// readySignal is a slog handler that closes ready when the gateway logs
// "ready": the API handler is installed by then.
type readySignal struct {
	slog.Handler
	ready chan struct{}
}

func (h readySignal) Enabled(context.Context, slog.Level) bool { return true }

func (h readySignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "ready" {
		close(h.ready)
	}
	return nil
}

func (h readySignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h readySignal) WithGroup(string) slog.Handler      { return h }

// client returns an HTTP client trusting pool that opens a new
// connection (a new handshake) for every request; h2 picks whether it
// offers HTTP/2 through ALPN.
func client(pool *x509.CertPool, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true,
		ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// TestTLSListener: with --tls-cert-path and --tls-key-path the API
// listener serves TLS: a client trusting the test CA gets its answers
// over HTTP/2 (ALPN) or HTTP/1.1, an SSE stream is relayed over HTTP/2,
// a certificate written over the files is served from the next handshake
// on without a restart, and a client that does not trust the CA is
// refused.
func TestTLSListener(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca := newCA(t)
	ca.issue(t, 100, certPath, keyPath)
	hub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer hub.Close()
	cfg, err := config.Load([]string{"--insecure-no-auth", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--hub-url", hub.URL, "--drain-timeout", "1s", "--tls-cert-path", certPath, "--tls-key-path", keyPath},
		func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	sig := readySignal{Handler: slog.DiscardHandler, ready: make(chan struct{})}
	g, err := New(cfg, slog.New(sig), "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	select {
	case <-sig.ready:
	case err := <-done:
		t.Fatalf("gateway stopped before it was ready: %v", err)
	}
	base := "https://" + g.apiLn.Addr().String()

	get := func(c *http.Client) (*http.Response, string) {
		t.Helper()
		resp, err := c.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	serial := func(resp *http.Response) int64 { return resp.TLS.PeerCertificates[0].SerialNumber.Int64() }

	resp, _ := get(client(ca.pool, true))
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 || serial(resp) != 100 {
		t.Fatalf("HTTP/2 client: %d over HTTP/%d with certificate %d, want 200 over HTTP/2 with 100", resp.StatusCode, resp.ProtoMajor, serial(resp))
	}
	resp, _ = get(client(ca.pool, false))
	if resp.StatusCode != 200 || resp.ProtoMajor != 1 {
		t.Fatalf("HTTP/1.1 client: %d over HTTP/%d", resp.StatusCode, resp.ProtoMajor)
	}

	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`))
	resp, err = client(ca.pool, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.ProtoMajor != 2 || !strings.Contains(string(b), `"hi"`) || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		t.Fatalf("stream over HTTP/2: %d HTTP/%d %v %q", resp.StatusCode, resp.ProtoMajor, err, b)
	}

	ca.issue(t, 200, certPath, keyPath)
	if resp, _ := get(client(ca.pool, true)); serial(resp) != 200 {
		t.Fatalf("after rotation the listener serves certificate %d, want 200", serial(resp))
	}

	if _, err := client(x509.NewCertPool(), true).Get(base + "/healthz"); err == nil {
		t.Fatal("a client that does not trust the CA was served")
	}
}

// TestTLSFlagsValidated: the TLS paths are set together and must load at
// startup; errors name the flags and their variables.
func TestTLSFlagsValidated(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	newCA(t).issue(t, 1, certPath, keyPath)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert-path", certPath}, "--tls-key-path (GATEWAY_TLS_KEY_PATH): set both or neither"},
		{[]string{"--tls-key-path", keyPath}, "--tls-cert-path (GATEWAY_TLS_CERT_PATH) and"},
		{[]string{"--tls-cert-path", keyPath, "--tls-key-path", certPath}, "--tls-cert-path (GATEWAY_TLS_CERT_PATH) / --tls-key-path"},
		{[]string{"--tls-cert-path", filepath.Join(dir, "missing"), "--tls-key-path", keyPath}, "GATEWAY_TLS_CERT_PATH"},
	} {
		_, err := config.Load(append([]string{"--insecure-no-auth"}, tc.args...), func(string) string { return "" }, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
}
