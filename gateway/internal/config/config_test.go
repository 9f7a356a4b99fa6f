package config

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaultsAndEnv(t *testing.T) {
	c, err := Load(nil, env(map[string]string{"GATEWAY_INSECURE_NO_AUTH": "true", "STARGATE_LAST_CLUSTER_ENABLED": "true",
		"OLRIC_PEERS": "a:1, b:2,", "GATEWAY_MODEL_CONFIG_JSON": `{"m":{"request_slo_ms":100,"tokens_per_minute":5}}`}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.LastCluster.Enabled || c.LastCluster.TTL != 10*time.Minute || c.LastCluster.LookupTimeout != 20*time.Millisecond ||
		c.LastCluster.LocalMaxEntries != 100000 || c.HubURL.String() != "http://127.0.0.1:8000" {
		t.Fatalf("%+v", c.LastCluster)
	}
	if strings.Join(c.Olric.Peers, ",") != "a:1,b:2" || c.Models.For("m").RequestSLOMs != 100 || c.Models.For("x").TokensPerMinute != 0 {
		t.Fatalf("peers %v models %v", c.Olric.Peers, c.Models)
	}
}

func TestErrorsNameTheField(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	_ = os.WriteFile(keys, []byte("# comment\nk1 alice\nk2\n\n"), 0o600)
	c, err := Load([]string{"--api-keys-file", keys}, env(nil), io.Discard)
	if err != nil || len(c.APIKeys) != 2 || c.APIKeys[0].Principal != "alice" || !strings.HasPrefix(c.APIKeys[1].Principal, "key-") {
		t.Fatalf("%v %+v", err, c)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{nil, nil, "--insecure-no-auth"},
		{[]string{"--insecure-no-auth", "--hub-url", "http://h/x"}, nil, "--hub-url (STARGATE_URL)"},
		{[]string{"--insecure-no-auth"}, map[string]string{"STARGATE_LAST_CLUSTER_TTL": "0s"}, "STARGATE_LAST_CLUSTER_TTL"},
		{[]string{"--insecure-no-auth"}, map[string]string{"STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT": "20"}, "STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT"},
		{[]string{"--insecure-no-auth"}, map[string]string{"OLRIC_ENV": "moon"}, "OLRIC_ENV"},
		{[]string{"--insecure-no-auth", "--model-config-json", `{"m":{"slo":1}}`}, nil, `unknown field "slo"`},
		{[]string{"--insecure-no-auth", "--model-config-json", `{"m":{"tokens_per_minute":-1}}`}, nil, "m.tokens_per_minute"},
		{[]string{"--insecure-no-auth", "--hub-token-file", filepath.Join(dir, "missing")}, nil, "--hub-token-file"},
		{[]string{"--api-keys-file", filepath.Join(dir, "nope")}, nil, "--api-keys-file"},
	} {
		_, err := Load(tc.args, env(tc.env), io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %v: err = %v, want it to name %s", tc.args, tc.env, err, tc.want)
		}
	}
}

func TestParseAPIKeys(t *testing.T) {
	if _, err := ParseAPIKeys([]byte("a b c\n")); err == nil || strings.Contains(err.Error(), "a b") {
		t.Fatalf("three fields: %v (must not echo the key)", err)
	}
	if _, err := ParseAPIKeys([]byte("a\na\n")); err == nil {
		t.Fatal("duplicate accepted")
	}
}
