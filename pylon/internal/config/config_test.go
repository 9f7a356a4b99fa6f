package config

import (
	"slices"
	"strings"
	"testing"
)

func validConfig(upstream string) Config {
	c := Default()
	c.UpstreamBaseURL = upstream
	c.ModelNames = "m"
	return c
}

func TestUpstreamBaseURLList(t *testing.T) {
	cases := []struct {
		in      string
		engines []string
	}{
		{"http://127.0.0.1:8090/", []string{"http://127.0.0.1:8090"}},
		{"http://127.0.0.1:8090", []string{"http://127.0.0.1:8090"}},
		{"https://engine/v2/", []string{"https://engine/v2"}},
		{"http://a:1, http://b:2/ ,https://c", []string{"http://a:1", "http://b:2", "https://c"}},
	}
	for _, tc := range cases {
		c := validConfig(tc.in)
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if !slices.Equal(c.Engines, tc.engines) {
			t.Errorf("%q: engines %q, want %q", tc.in, c.Engines, tc.engines)
		}
		if want := strings.Join(tc.engines, ","); c.UpstreamBaseURL != want {
			t.Errorf("%q: UpstreamBaseURL %q, want %q", tc.in, c.UpstreamBaseURL, want)
		}
	}
}

func TestUpstreamBaseURLListErrors(t *testing.T) {
	cases := []struct{ in, entry string }{
		{"", "required"},
		{"ftp://x", `"ftp://x"`},
		{"http://a:1,ftp://b", `"ftp://b"`},
		{"http://a:1,127.0.0.1:8090", `"127.0.0.1:8090"`},
		{"http://a:1,http://b:2?x=1", `"http://b:2?x=1"`},
		{"http://a:1,http://b:2#f", `"http://b:2#f"`},
		{"http://a:1,http://", `"http:"`},
		{"http://a:1,,http://b:2", "empty entry"},
		{"http://a:1,", "empty entry"},
		{"http://a:1,http://a:1/", `"http://a:1": listed twice`},
	}
	for _, tc := range cases {
		c := validConfig(tc.in)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), "--upstream-http-base-url") || !strings.Contains(err.Error(), tc.entry) {
			t.Errorf("%q: error %v, want one naming --upstream-http-base-url and %s", tc.in, err, tc.entry)
		}
	}
}
