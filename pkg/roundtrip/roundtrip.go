package roundtrip

import (
	"net/http"
	"net/url"
	"strings"
)

// Do sends req on rt and returns its answer, a redirect included, as it
// came. An error is wrapped as http.Client wraps it (*url.Error naming
// the method and the URL, a password shown as ***), so errors.Is and
// errors.As see the transport's error through it. As with RoundTrip, rt
// closes req's body.
func Do(rt http.RoundTripper, req *http.Request) (*http.Response, error) {
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: op(req.Method), URL: stripPassword(req.URL), Err: err}
	}
	return resp, nil
}

// stripPassword is u as http.Client shows it in errors.
func stripPassword(u *url.URL) string {
	if _, ok := u.User.Password(); ok {
		return strings.Replace(u.String(), u.User.String()+"@", u.User.Username()+":***@", 1)
	}
	return u.String()
}

// op is http.Client's Op of a *url.Error: "Post" for POST, "Get" for
// the empty method.
func op(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}
