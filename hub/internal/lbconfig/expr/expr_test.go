package expr

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw    string
		method string
		params []Param
	}{
		{"pulsar;seed=x", "pulsar", []Param{{"seed", Value{Kind: Token, Text: "x"}}}},
		{" pulsar; seed=x ", "pulsar", []Param{{"seed", Value{Kind: Token, Text: "x"}}}},
		{"PULSAR_WAIT_AND_WIDEN;seed=stable-a", "PULSAR_WAIT_AND_WIDEN", []Param{{"seed", Value{Kind: Token, Text: "stable-a"}}}},
		{"powerOf2;sample_count=2", "powerOf2", []Param{{"sample_count", Value{Kind: Integer, Int: 2, Dec: 2}}}},
		{`pulsar;seed="spaces and = signs"`, "pulsar", []Param{{"seed", Value{Kind: String, Text: "spaces and = signs"}}}},
		{`pulsar;seed="escaped \" quote \\ slash"`, "pulsar", []Param{{"seed", Value{Kind: String, Text: `escaped " quote \ slash`}}}},
		{"pulsar;a=999999999999999;b=-999999999999999", "pulsar", []Param{
			{"a", Value{Kind: Integer, Int: 999999999999999, Dec: 999999999999999}},
			{"b", Value{Kind: Integer, Int: -999999999999999, Dec: -999999999999999}}}},
		{"wait-and-widen;next_bucket_unlock_factor=0.125", "wait-and-widen", []Param{{"next_bucket_unlock_factor", Value{Kind: Decimal, Dec: 0.125}}}},
		{`wait-and-widen;next_bucket_unlock_factor="0.0625"`, "wait-and-widen", []Param{{"next_bucket_unlock_factor", Value{Kind: String, Text: "0.0625"}}}},
		{"random", "random", nil},
		{"r;k=*tok:en/x", "r", []Param{{"k", Value{Kind: Token, Text: "*tok:en/x"}}}},
		{"r;k=-1.5;k2=123456789012.123", "r", []Param{{"k", Value{Kind: Decimal, Dec: -1.5}}, {"k2", Value{Kind: Decimal, Dec: 123456789012.123}}}},
	} {
		e, err := Parse(tc.raw)
		if err != nil {
			t.Errorf("Parse(%q) = %v", tc.raw, err)
			continue
		}
		if e.Method != tc.method || len(e.Params) != len(tc.params) {
			t.Errorf("Parse(%q) = %+v", tc.raw, e)
			continue
		}
		for i := range tc.params {
			if e.Params[i] != tc.params[i] {
				t.Errorf("Parse(%q) param %d = %+v, want %+v", tc.raw, i, e.Params[i], tc.params[i])
			}
		}
	}
}

func TestParseLimits(t *testing.T) {
	t.Parallel()
	atLimit := `pulsar;seed="` + strings.Repeat("x", 1010) + `"`
	if len(atLimit) != MaxLen {
		t.Fatalf("len = %d", len(atLimit))
	}
	if _, err := Parse(atLimit); err != nil {
		t.Errorf("1024 bytes: %v", err)
	}
	var b strings.Builder
	b.WriteString("pulsar")
	for i := range 32 {
		b.WriteString(";p")
		b.WriteString(strings.Repeat("x", i+1))
		b.WriteString("=1")
	}
	if _, err := Parse(b.String()); err != nil {
		t.Errorf("32 params: %v", err)
	}
	expectRule(t, atLimit[:len(atLimit)-1]+`x"`, P7)
	expectRule(t, b.String()+";q=1", P11)
}

// TestParseRules has at least one case per rule, and asserts the rule tag
// each message starts with.
func TestParseRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		rule Rule
	}{
		{`"pulsar";seed=x`, P1},
		{"1;seed=x", P1},
		{"", P1},
		{"   ", P1},
		{"pulsar ;seed=x", P1},
		{"pulsar;seed=x trailing", P1},
		{"pulsar;seed=a=b", P1},
		{"pulsar;seed=:eA==:", P2},
		{"pulsar;seed=@123", P2},
		{`pulsar;seed=%"x"`, P2},
		{"pulsar;seed= x", P2},
		{"pulsar;n=-", P2},
		{"pulsar;n=1.", P2},
		{"pulsar;n=+1", P2},
		{`pulsar;seed="x`, P2},
		{`pulsar;seed="a\b"`, P2},
		{"pulsar;seed=x,random", P3},
		{`pulsar;seed="x,y"`, P3},
		{"pulsar;seed", P4},
		{"pulsar;seed=", P4},
		{"pulsar;seed=;n=1", P4},
		{"pulsar;require_input_tokens=?1", P4},
		{"pulsar;require_input_tokens=?0", P4},
		{"pulsar;seed=x;seed=y", P5},
		{"pulsar;Seed=x", P6},
		{"pulsar;*=x", P6},
		{"pulsar;seed-key=x", P6},
		{"pulsar;seed.key=x", P6},
		{"pulsar;1seed=x", P6},
		{"pulsar;seed =x", P6},
		{"pulsar;\tseed=x", P6},
		{"pulsar;", P6},
		{"pulsar;n=1000000000000000", P8},
		{"pulsar;n=1000000000000.0", P8},
		{"pulsar;n=0.0625", P8},
		{`pulsar;seed="x;y"`, P9},
		{`pulsar;seed="x\";y"`, P9},
		{"*pulsar;seed=x", P10},
		{"pul/sar;seed=x", P10},
		{"pul:sar;seed=x", P10},
	} {
		expectRule(t, tc.raw, tc.rule)
	}
}

func expectRule(t *testing.T, raw string, want Rule) {
	t.Helper()
	_, err := Parse(raw)
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("Parse(%q) = %v, want %s", raw, err, want)
		return
	}
	if e.Rule != want || !strings.HasPrefix(e.Error(), want.String()+": ") {
		t.Errorf("Parse(%q) = %q, want rule %s", raw, e.Error(), want)
	}
}

func TestIsPlainNumber(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"0.0625": true, "+0.0625": true, "-0.0625": true, "12": true, "+7": true,
		"NaN": false, "inf": false, "-inf": false, "1e2": false, "0x10": false, ".5": false,
		"1.": false, " 1": false, "1 ": false, "+": false, "": false, "1.2.3": false, "--1": false,
	} {
		if got := IsPlainNumber(s); got != want {
			t.Errorf("IsPlainNumber(%q) = %v", s, got)
		}
	}
}

// FuzzParseExpression parses arbitrary header values. A refusal must be a
// typed *Error naming one of the rules. An accepted expression must be
// within the limits (length, parameter count, no comma), have unique keys
// of the documented form and values of the four kinds, and survive a
// round trip: written back canonically (format) it parses to the same
// expression, and that form is never longer than the input.
func FuzzParseExpression(f *testing.F) {
	for _, s := range []string{
		"pulsar;seed=x", `pulsar;seed="a\"b"`, "wait-and-widen;n=3;next_bucket_unlock_factor=0.125",
		"power-of-n;sample_count=64", "x;a=?1", "p;k=:aGk=:", "p;k=-12.5", "p;k=1.", "p; a=1 ", `"`, ";", "",
		"p;a=007;b=-0.0;c=1.500;d=*tok/x:y;e=\"\\\\\"", "m;k=999999999999999;j=-999999999999.999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		e, err := Parse(raw)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || pe.Rule < P1 || pe.Rule > P11 {
				t.Fatalf("Parse(%q): untyped error %v", raw, err)
			}
			return
		}
		if len(raw) > MaxLen || len(e.Params) > MaxParams || strings.Contains(raw, ",") {
			t.Fatalf("Parse(%q) accepted beyond limits", raw)
		}
		seen := map[string]bool{}
		for _, p := range e.Params {
			if seen[p.Key] || !validKey(p.Key) {
				t.Fatalf("Parse(%q): bad key %q", raw, p.Key)
			}
			seen[p.Key] = true
			if p.Value.Kind < Integer || p.Value.Kind > String {
				t.Fatalf("Parse(%q): bad kind", raw)
			}
		}
		canonical := format(e)
		again, err := Parse(canonical)
		if err != nil {
			t.Fatalf("Parse(%q) accepted, its canonical form %q refused: %v", raw, canonical, err)
		}
		if !reflect.DeepEqual(e, again) {
			t.Fatalf("Parse(%q) = %+v, its canonical form %q parses to %+v", raw, e, canonical, again)
		}
		if len(canonical) > len(raw) {
			t.Fatalf("canonical form %q of %q is longer than the input", canonical, raw)
		}
	})
}

// format writes e back as a header value in the shortest canonical form:
// no spaces, integers without leading zeros, decimals with the digits
// they need (and a ".0" so they stay decimals), strings with only the two
// escapes.
func format(e Expression) string {
	var b strings.Builder
	b.WriteString(e.Method)
	for _, p := range e.Params {
		b.WriteString(";" + p.Key + "=")
		switch v := p.Value; v.Kind {
		case Integer:
			b.WriteString(strconv.FormatInt(v.Int, 10))
		case Decimal:
			d := strconv.FormatFloat(v.Dec, 'f', -1, 64)
			if !strings.Contains(d, ".") {
				d += ".0"
			}
			b.WriteString(d)
		case Token:
			b.WriteString(v.Text)
		case String:
			b.WriteString(`"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v.Text) + `"`)
		}
	}
	return b.String()
}
