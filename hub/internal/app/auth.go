package app

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"

	"github.com/stargate-router/stargate/pkg/cli"
	"github.com/stargate-router/stargate/pkg/openai"
)

// adminOnly guards next with --admin-token-file when it is set. The file
// is re-read on every request, so the token can be rotated without a
// restart; the admin listener serves scrapes and operators, a few requests
// a second at most. A file that cannot be read refuses every request (and
// says why in the log only), so a broken secret mount closes the endpoints
// instead of opening them.
func (a *App) adminOnly(next http.Handler) http.Handler {
	path := a.cfg.AdminTokenFile
	if path == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want, err := cli.ReadSecretFile(path)
		if err != nil {
			a.log.Error("reading --admin-token-file failed; refusing admin requests", "err", err)
		}
		if err != nil || !bearerIs(r.Header.Get("Authorization"), want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stargate-hub-admin"`)
			openai.WriteError(w, &openai.Error{Status: http.StatusUnauthorized, Type: openai.TypeAuthentication,
				Code: "unauthorized", Message: "authentication required"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerIs reports whether an Authorization value is "Bearer <want>". Both
// tokens are hashed first, so the comparison takes the same time whatever
// their lengths.
func bearerIs(authorization, want string) bool {
	scheme, got, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || want == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// isLoopback reports whether a listen address binds only the loopback
// interface, where an open endpoint is reachable from this host alone. An
// empty or wildcard host binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
