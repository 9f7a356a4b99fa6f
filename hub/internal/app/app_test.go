package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stargate-router/stargate/hub/internal/proxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// running is an App serving on loopback ports chosen by the kernel.
type running struct {
	app                *App
	apiURL, metricsURL string
	client             *http.Client
}

// startApp runs an App built from securedDefaults changed by mutate, and
// stops it when the test ends.
func startApp(t *testing.T, mutate func(*Config)) *running {
	t.Helper()
	cfg := securedDefaults(t)
	cfg.Listen, cfg.BackendListen, cfg.MetricsListen = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Drain = 100 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := New(cfg, slog.New(slog.DiscardHandler), "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	scheme := "http://"
	if cfg.APITLSCertPath != "" {
		scheme = "https://"
	}
	return &running{app: a, apiURL: scheme + a.api.Listener.Addr().String(),
		metricsURL: "http://" + a.metrics.Listener.Addr().String(), client: &http.Client{Transport: tr}}
}

// get sends GET url with an optional bearer token and returns the status
// and body.
func get(t *testing.T, cl *http.Client, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// The API listener serves only the gateway: /v1/models and the inference
// routes need its token, the probes never do, and /debug/state is not
// there at all.
func TestAPIListenerAuthenticatesClients(t *testing.T) {
	r := startApp(t, nil)
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/v1/models", "", http.StatusUnauthorized},
		{"/v1/models", "wrong", http.StatusUnauthorized},
		{"/v1/models", "gw-secret", http.StatusOK},
		{"/v1/chat/completions", "", http.StatusUnauthorized},
		{"/debug/state", "", http.StatusNotFound},
		{"/debug/state", "gw-secret", http.StatusNotFound},
	} {
		if got, body := get(t, r.client, r.apiURL+tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s (token %q): status %d, want %d: %s", tc.path, tc.token, got, tc.want, body)
		}
	}
}

// The admin listener serves /debug/state (and /metrics); with
// --admin-token-file /debug/ needs that token, re-read on every request,
// and /metrics stays open unless --metrics-require-admin-token.
func TestAdminListener(t *testing.T) {
	t.Run("open", func(t *testing.T) {
		r := startApp(t, func(c *Config) { c.Pprof = true })
		for _, path := range []string{"/debug/state", "/metrics", "/debug/pprof/", "/debug/routing", "/ui", "/ui/page.js"} {
			if got, body := get(t, r.client, r.metricsURL+path, ""); got != http.StatusOK {
				t.Errorf("GET %s: status %d: %s", path, got, body)
			}
		}
		_, body := get(t, r.client, r.metricsURL+"/debug/state", "")
		var st struct {
			Config  map[string]any      `json:"config"`
			Escapes []proxy.EscapeCount `json:"session_escapes"`
		}
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("/debug/state: %v", err)
		}
		if st.Config["client_auth"] != "gateway-token" || st.Config["registration_auth"] != true {
			t.Errorf("/debug/state config %v", st.Config)
		}
		if st.Escapes == nil || len(st.Escapes) != 0 {
			t.Errorf("/debug/state session_escapes %v, want an empty list before any request", st.Escapes)
		}
	})
	t.Run("admin token", func(t *testing.T) {
		var tokenPath string
		r := startApp(t, func(c *Config) {
			tokenPath = writeSecret(t, "admin-token", "adm-1")
			c.AdminTokenFile, c.Pprof = tokenPath, true
		})
		for _, tc := range []struct {
			path, token string
			want        int
		}{
			{"/debug/state", "", http.StatusUnauthorized},
			{"/debug/state", "gw-secret", http.StatusUnauthorized},
			{"/debug/state", "adm-1", http.StatusOK},
			{"/debug/pprof/", "", http.StatusUnauthorized},
			{"/debug/pprof/", "adm-1", http.StatusOK},
			{"/debug/nothing", "", http.StatusUnauthorized},
			{"/debug/routing", "", http.StatusUnauthorized},
			{"/debug/routing", "adm-1", http.StatusOK},
			// The page's files hold no data; the page asks for the token.
			{"/ui", "", http.StatusOK},
			{"/ui/page.css", "", http.StatusOK},
			{"/ui/nothing", "", http.StatusNotFound},
			{"/metrics", "", http.StatusOK},
		} {
			if got, body := get(t, r.client, r.metricsURL+tc.path, tc.token); got != tc.want {
				t.Errorf("GET %s (token %q): status %d, want %d: %s", tc.path, tc.token, got, tc.want, body)
			}
		}
		if err := os.WriteFile(tokenPath, []byte("adm-2\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, _ := get(t, r.client, r.metricsURL+"/debug/state", "adm-1"); got != http.StatusUnauthorized {
			t.Errorf("the rotated-out token: status %d, want 401", got)
		}
		if got, _ := get(t, r.client, r.metricsURL+"/debug/state", "adm-2"); got != http.StatusOK {
			t.Errorf("the rotated-in token: status %d, want 200", got)
		}
		if err := os.Remove(tokenPath); err != nil {
			t.Fatal(err)
		}
		if got, _ := get(t, r.client, r.metricsURL+"/debug/state", "adm-2"); got != http.StatusUnauthorized {
			t.Errorf("with the token file gone: status %d, want 401 (closed, not open)", got)
		}
	})
	t.Run("routing page off", func(t *testing.T) {
		r := startApp(t, func(c *Config) { c.RoutingPageRecords = 0 })
		for _, path := range []string{"/ui", "/debug/routing"} {
			if got, body := get(t, r.client, r.metricsURL+path, ""); got != http.StatusNotFound {
				t.Errorf("GET %s with the page off: status %d, want 404: %s", path, got, body)
			}
		}
	})
	t.Run("metrics require the admin token", func(t *testing.T) {
		r := startApp(t, func(c *Config) {
			c.AdminTokenFile, c.MetricsRequireAdminToken = writeSecret(t, "admin-token", "adm"), true
		})
		if got, _ := get(t, r.client, r.metricsURL+"/metrics", ""); got != http.StatusUnauthorized {
			t.Errorf("/metrics without the token: status %d, want 401", got)
		}
		if got, _ := get(t, r.client, r.metricsURL+"/metrics", "adm"); got != http.StatusOK {
			t.Errorf("/metrics with the token: status %d, want 200", got)
		}
	})
}

// writeCert writes a self-signed certificate for 127.0.0.1 named cn over
// certPath and keyPath and returns a pool that trusts it.
func writeCert(t *testing.T, certPath, keyPath, cn string) *x509.CertPool {
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
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// With --api-tls-cert-path the API listener speaks TLS and HTTP/2 (ALPN
// h2), and a certificate rotated on disk is what the next handshake
// presents, without a restart.
func TestAPIListenerTLS(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writeCert(t, certPath, keyPath, "hub-first")
	r := startApp(t, func(c *Config) { c.APITLSCertPath, c.APITLSKeyPath = certPath, keyPath })

	// tlsGet makes one request on a fresh connection (a new transport: no
	// connection or session reuse) trusting roots, and returns the
	// certificate the server presented and the protocol it spoke.
	tlsGet := func(roots *x509.CertPool) (string, int, error) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.apiURL+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer gw-secret")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return "", 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].Subject.CommonName, resp.ProtoMajor, nil
	}
	cn, proto, err := tlsGet(first)
	if err != nil || cn != "hub-first" || proto != 2 {
		t.Fatalf("first certificate: cn %q HTTP/%d err %v, want hub-first over HTTP/2", cn, proto, err)
	}

	second := writeCert(t, certPath, keyPath, "hub-second")
	cn, _, err = tlsGet(second)
	if err != nil || cn != "hub-second" {
		t.Fatalf("after rotation: cn %q err %v, want hub-second", cn, err)
	}
	if _, _, err := tlsGet(first); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client trusting only the old certificate: err %v, want a certificate error", err)
	}
	// Plaintext on a TLS listener gets no HTTP answer.
	if resp, err := r.client.Get(strings.Replace(r.apiURL, "https://", "http://", 1) + "/healthz"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the TLS listener served plaintext HTTP")
		}
	}
}
