package helpenv

import (
	"slices"
	"strings"
	"testing"
)

const sample = `hub: routes OpenAI requests.

Usage: hub [flags]

FLAG                 ENV                  DEFAULT          MEANING
--listen             HUB_LISTEN           127.0.0.1:8000   HTTP listen address
--hub-id             HUB_ID               vm               this replica's identity
--tls-insecure       PYLON_TLS_INSECURE   false            TLS without verifying (alias --quic-insecure)
--quic-insecure      PYLON_TLS_INSECURE   false            alias
`

func TestParse(t *testing.T) {
	got, err := Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"HUB_LISTEN", "HUB_ID", "PYLON_TLS_INSECURE"}
	if !slices.Equal(got, want) {
		t.Fatalf("Parse = %v, want %v", got, want)
	}
}

func TestParseRefusesWhatIsNotAFlagTable(t *testing.T) {
	for name, help := range map[string]string{
		"no table":     "usage: x [flags]\n",
		"no ENV":       "FLAG   DEFAULT   MEANING\n--a    1         b\n",
		"empty table":  "FLAG   ENV   DEFAULT\n\n",
		"short line":   "FLAG   ENV   DEFAULT\n--a\n",
		"not a name":   "FLAG   ENV   DEFAULT\n--a    lower 1\n",
		"shifted cell": "FLAG   ENV   DEFAULT\n--abcdefg X 1\n",
	} {
		if _, err := Parse(help); err == nil {
			t.Errorf("%s: Parse accepted %q", name, help)
		}
	}
}

func TestParseRealBinaryShape(t *testing.T) {
	// The header of pkg/cli's table pads columns with spaces; a MEANING
	// that contains " ENV " must not move the column.
	help := "FLAG    ENV      DEFAULT  MEANING\n--x     X_VAR    1        the ENV of x\n"
	got, err := Parse(help)
	if err != nil || !slices.Equal(got, []string{"X_VAR"}) {
		t.Fatalf("Parse = %v, %v", got, err)
	}
	if strings.Contains(strings.Join(got, ","), "of") {
		t.Fatal("read the meaning column")
	}
}
