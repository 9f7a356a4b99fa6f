package plot

import (
	"encoding/xml"
	"math"
	"strings"
	"testing"
)

func TestDashboardIsWellFormedSVG(t *testing.T) {
	svg := Dashboard("stargate / Hub <routing>", "run of 60 s", []Panel{
		{Title: "Requests", Unit: "reqps", Lines: []Line{
			{Name: "200", Points: []Point{{0, 1}, {2, 3}, {4, math.NaN()}, {6, 2}}},
			{Name: "503", Points: []Point{{0, 0}, {6, 0.5}}},
		}},
		{Title: "Share", Unit: "percentunit", Ratio: true, Lines: []Line{{Name: "a & b", Points: []Point{{0, 0.25}, {6, 0.75}}}}},
		{Title: "Retries exhausted", Unit: "ops", Note: "no data: only when a request runs out of retries"},
		{Title: "Many", Lines: manyLines(9)},
	})
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"stargate / Hub &lt;routing&gt;", "req/s", "75%", "no data: only when", "a &amp; b", "(+3 more)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("picture lacks %q", want)
		}
	}
	// The NaN sample breaks the line: two M commands in the first path.
	first := svg[strings.Index(svg, "<path"):]
	first = first[:strings.Index(first, "/>")]
	if strings.Count(first, "M") != 2 {
		t.Errorf("a NaN did not break the line: %s", first)
	}
}

func manyLines(n int) []Line {
	var out []Line
	for i := range n {
		out = append(out, Line{Name: string(rune('a' + i)), Points: []Point{{0, float64(i)}, {1, float64(i)}}})
	}
	return out
}

func TestWrap(t *testing.T) {
	got := wrap("no data: only when a request runs out of retries", 20)
	want := []string{"no data: only when a", "request runs out of", "retries"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("wrap = %q, want %q", got, want)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		v    float64
		unit string
		want string
	}{
		{0.25, "percentunit", "25%"}, {0.012, "s", "12 ms"}, {2.5, "s", "2.5 s"}, {1500, "short", "1.5k"},
		{3, "reqps", "3 req/s"}, {0, "s", "0 s"}, {2e6, "bytes", "2MB"},
	} {
		if got := Format(c.v, c.unit); got != c.want {
			t.Errorf("Format(%v, %s) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
}

func TestNiceTicksCoverTheRange(t *testing.T) {
	for _, c := range [][2]float64{{0, 1}, {0, 0.37}, {-2, 7}, {0, 0}, {3, 3}, {0, 123456}} {
		ts := niceTicks(c[0], c[1], 4)
		if ts[0] > c[0] || ts[len(ts)-1] < c[1] || len(ts) < 2 || len(ts) > 8 {
			t.Errorf("niceTicks(%v, %v) = %v", c[0], c[1], ts)
		}
	}
}
