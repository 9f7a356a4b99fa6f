package pagecheck

import (
	"strings"
	"testing"
)

func TestLive(t *testing.T) {
	if err := live(snapshot{StatusFound: true, State: "live"}); err != nil {
		t.Error(err)
	}
	for s, want := range map[*snapshot]string{
		{}: "the page has no #status",
		{StatusFound: true, State: "auth", StatusText: "admin token needed"}: `found data-state="auth" (text "admin token needed")`,
		{StatusFound: true, State: "loading"}:                                `found data-state="loading"`,
	} {
		if err := live(*s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", *s, err, want)
		}
	}
}

func TestControlsShown(t *testing.T) {
	if err := controlsShown(snapshot{Controls: []string{"f-model", "f-region", "f-window", "f-sessions", "f-flow"}}); err != nil {
		t.Error(err)
	}
	err := controlsShown(snapshot{Controls: []string{"f-model", "f-window", "f-sessions"}})
	if err == nil || !strings.Contains(err.Error(), "missing [#f-region #f-flow]") {
		t.Errorf("got %v", err)
	}
}

func TestClustersShown(t *testing.T) {
	s := snapshot{Clusters: []string{"near-a", "far-a", "near-b"}}
	if err := clustersShown(s, []string{"far-a", "near-a"}); err != nil {
		t.Error(err)
	}
	err := clustersShown(s, []string{"far-a", "far-b", "near-a", "near-c"})
	if err == nil || !strings.Contains(err.Error(), "missing [far-b near-c]; found [near-a far-a near-b]") {
		t.Errorf("got %v", err)
	}
}

func TestFollowedRow(t *testing.T) {
	s := snapshot{Sessions: []row{
		{"a", "first stay"},
		{"b", "escape followed"},
		// data-flows holds whole flow names: "escaped" is not "escape".
		{"c", "escaped followed"},
		{"d", "first escape stay followed"},
	}}
	for _, c := range []struct {
		prefer []string
		want   string
	}{
		{nil, "b"},
		{[]string{"d"}, "d"},
		// A preferred session the page does not show as followed.
		{[]string{"a", "c", "x"}, "b"},
	} {
		if got, err := followedRow(s, c.prefer); err != nil || got != c.want {
			t.Errorf("prefer %v: got %q, %v; want %q", c.prefer, got, err, c.want)
		}
	}
	_, err := followedRow(snapshot{Sessions: s.Sessions[:1]}, nil)
	if err == nil || !strings.Contains(err.Error(), "found 1 rows: a [first stay]") {
		t.Errorf("no followed row: %v", err)
	}
}

func TestDetailFollowed(t *testing.T) {
	if err := detailFollowed(snapshot{Detail: []turn{{"0", "first"}, {"1", "escape"}, {"2", "followed"}}}); err != nil {
		t.Error(err)
	}
	for s, want := range map[*snapshot]string{
		{}: "found 0: ",
		{Detail: []turn{{"0", "escape"}, {"1", "bounced"}}}: "found 2: 0:escape 1:bounced",
	} {
		if err := detailFollowed(*s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", *s, err, want)
		}
	}
}

func TestCSSString(t *testing.T) {
	for in, want := range map[string]string{
		"a79a9f9573c1fb1b": `"a79a9f9573c1fb1b"`,
		`a"b\c`:            `"a\"b\\c"`,
	} {
		if got := cssString(in); got != want {
			t.Errorf("cssString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestPrefixShown(t *testing.T) {
	if err := prefixShown(snapshot{PrefixEnabled: "true", HotPrefixes: 2}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []snapshot{{PrefixEnabled: "false", HotPrefixes: 2}, {PrefixEnabled: "true"}, {}} {
		if err := prefixShown(s); err == nil || !strings.Contains(err.Error(), "data-enabled") {
			t.Errorf("%+v: %v, want an error naming #prefix[data-enabled]", s, err)
		}
	}
}
