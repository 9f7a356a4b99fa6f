package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
)

// Server returns a TLS server configuration whose certificate is loaded
// from certPath and keyPath on every handshake. It fails at once if the
// pair cannot be loaded now, naming the flags.
func Server(certPath, keyPath string) (*tls.Config, error) {
	if certPath == "" || keyPath == "" {
		return nil, errors.New("--tls-cert-path and --tls-key-path must be set together")
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		return nil, fmt.Errorf("--tls-cert-path/--tls-key-path: %w", err)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certPath, keyPath)
			if err != nil {
				return nil, err
			}
			return &c, nil
		},
	}, nil
}

// Listener wraps ln in TLS from Server(certPath, keyPath), offering HTTP/2
// and HTTP/1.1 by ALPN: what an HTTP listener (the gateway's or the hub's
// client side) serves. On error ln is closed.
func Listener(ln net.Listener, certPath, keyPath string) (net.Listener, error) {
	cfg, err := Server(certPath, keyPath)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	return tls.NewListener(ln, cfg), nil
}

// Client returns a TLS client configuration trusting the PEM certificates
// in caPath (the system roots when caPath is empty). insecure skips
// verification, for tests and trusted networks only.
func Client(caPath string, insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure} //nolint:gosec // G402: opt-in by flag, documented as unsafe.
	if caPath == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caPath) //nolint:gosec // G304: the operator names this file.
	if err != nil {
		return nil, fmt.Errorf("--tls-cert-path: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--tls-cert-path %s: no PEM certificate found", caPath)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
