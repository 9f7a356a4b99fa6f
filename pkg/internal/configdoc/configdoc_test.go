package configdoc

import (
	"errors"
	"strings"
	"testing"
)

const sampleHelp = `hub: routes OpenAI requests to clusters.

Usage: hub [flags]

Every flag can also be set through its environment variable; a flag on the
command line wins over the environment.

FLAG             ENV              DEFAULT         MEANING
--listen         HUB_LISTEN       127.0.0.1:8000  HTTP listen address | with a pipe
--hub-id         HUB_ID           myhost          this replica's identity
--token          -                ""              shared token, spaces  inside
`

func TestParseAndRender(t *testing.T) {
	bin, err := Parse("hub", strings.NewReader(sampleHelp))
	if err != nil {
		t.Fatal(err)
	}
	if bin.Summary != "hub: routes OpenAI requests to clusters." || len(bin.Flags) != 3 {
		t.Fatalf("parsed %+v", bin)
	}
	want := Flag{Name: "--token", Env: "-", Default: `""`, Meaning: "shared token, spaces  inside"}
	if bin.Flags[2] != want {
		t.Fatalf("row 3 = %+v, want %+v", bin.Flags[2], want)
	}
	var out strings.Builder
	if err := Render(&out, []Binary{bin}, map[string]string{"myhost": "the host name"}); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"## hub",
		"| `--listen` | `HUB_LISTEN` | `127.0.0.1:8000` | HTTP listen address \\| with a pipe |",
		"| `--hub-id` | `HUB_ID` | the host name | this replica's identity |",
		"| `--token` | `-` | `\"\"` | shared token, spaces  inside |",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("rendered reference lacks %q:\n%s", line, out.String())
		}
	}
}

func TestParseRefusesWhatIsNotATable(t *testing.T) {
	for name, help := range map[string]string{
		"no table":  "Usage of x:\n  -listen string\n",
		"bad row":   "FLAG    ENV     DEFAULT  MEANING\nlisten  X_LISTEN  :80  addr\n",
		"no header": "--listen  X  :80  addr\n",
	} {
		if _, err := Parse("x", strings.NewReader(help)); err == nil {
			t.Errorf("%s: parsed", name)
		} else if name != "bad row" && !errors.Is(err, ErrNoTable) {
			t.Errorf("%s: err %v, want ErrNoTable", name, err)
		}
	}
}
