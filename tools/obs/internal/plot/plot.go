// Package plot draws a dashboard's panels as one SVG picture: a grid of
// small line charts, one per panel, from the series Prometheus returned
// for the panel's queries. Grafana cannot run on the build machine; this
// is how docs/operations.md shows what each dashboard looks like on a
// real run.
package plot

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Point is one sample: seconds since the picture's start and a value.
type Point struct{ X, Y float64 }

// Line is one named series.
type Line struct {
	Name   string
	Points []Point
}

// Panel is one chart of the grid.
type Panel struct {
	Title string
	// Unit is the Grafana unit of the values (percentunit, s, reqps, ops,
	// short, bytes); it picks the tick format.
	Unit string
	// Ratio fixes the axis to 0..1.
	Ratio bool
	// Note replaces the chart when there are no lines (why it is empty).
	Note  string
	Lines []Line
}

// Layout of the grid.
const (
	columns       = 3
	cellW, plotH  = 420, 150
	padL, padR    = 58, 12
	padT          = 30
	legendLineH   = 14
	maxLegend     = 6
	headerH       = 56
	fontFamily    = `font-family="sans-serif"`
	gridColour    = "#e3e3e3"
	axisColour    = "#555"
	noteColour    = "#888"
	titleFontSize = 13
	noteWidth     = 52 // characters of a note line
)

// palette is Grafana's classic series colours.
var palette = []string{"#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0", "#508642", "#cca300"}

// Dashboard draws title, subtitle and panels as an SVG document.
func Dashboard(title, subtitle string, panels []Panel) string {
	rows := (len(panels) + columns - 1) / columns
	cellH := padT + plotH + 24 + maxLegend*legendLineH + 8
	width, height := columns*cellW, headerH+rows*cellH
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="12" y="26" %s font-size="18" font-weight="bold">%s</text>`+"\n", fontFamily, esc(title))
	fmt.Fprintf(&b, `<text x="12" y="46" %s font-size="12" fill="%s">%s</text>`+"\n", fontFamily, noteColour, esc(subtitle))
	for i, p := range panels {
		x0, y0 := (i%columns)*cellW, headerH+(i/columns)*cellH
		cell(&b, p, float64(x0), float64(y0), cellH)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func cell(b *strings.Builder, p Panel, x0, y0 float64, cellH int) {
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%d" height="%d" fill="none" stroke="%s"/>`+"\n", x0+4, y0+2, cellW-8, cellH-6, gridColour)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" %s font-size="%d" font-weight="bold">%s</text>`+"\n", x0+12, y0+20, fontFamily, titleFontSize, esc(p.Title))
	left, top := x0+padL, y0+padT
	w := float64(cellW - padL - padR)
	if len(p.Lines) == 0 {
		for i, l := range wrap(p.Note, noteWidth) {
			fmt.Fprintf(b, `<text x="%.0f" y="%.0f" %s font-size="12" fill="%s" text-anchor="middle">%s</text>`+"\n",
				left+w/2, top+plotH/2+float64(i*16), fontFamily, noteColour, esc(l))
		}
		return
	}
	xMax, yMin, yMax := 0.0, 0.0, 0.0
	for _, l := range p.Lines {
		for _, pt := range l.Points {
			xMax = math.Max(xMax, pt.X)
			if !math.IsNaN(pt.Y) && !math.IsInf(pt.Y, 0) {
				yMin, yMax = math.Min(yMin, pt.Y), math.Max(yMax, pt.Y)
			}
		}
	}
	if p.Ratio {
		yMin, yMax = 0, 1
	}
	ticks := niceTicks(yMin, yMax, 4)
	yMin, yMax = ticks[0], ticks[len(ticks)-1]
	sx := func(x float64) float64 { return left + x/math.Max(xMax, 1)*w }
	sy := func(y float64) float64 { return top + plotH - (y-yMin)/(yMax-yMin)*plotH }
	for _, t := range ticks {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, sy(t), left+w, sy(t), gridColour)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" %s font-size="10" text-anchor="end">%s</text>`+"\n", left-4, sy(t)+3, fontFamily, esc(Format(t, p.Unit)))
	}
	for _, t := range niceTicks(0, math.Max(xMax, 1), 5) {
		if t > xMax {
			continue
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" %s font-size="10" text-anchor="middle">%ss</text>`+"\n", sx(t), top+plotH+13, fontFamily, trimFloat(t))
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, top+plotH, left+w, top+plotH, axisColour)
	for i, l := range p.Lines {
		colour := palette[i%len(palette)]
		var path strings.Builder
		pen := false
		for _, pt := range l.Points {
			if math.IsNaN(pt.Y) || math.IsInf(pt.Y, 0) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, sx(pt.X), sy(math.Max(math.Min(pt.Y, yMax), yMin)))
			pen = true
		}
		if path.Len() > 0 {
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", strings.TrimSpace(path.String()), colour)
		}
		if i < maxLegend {
			ly := top + plotH + 28 + float64(i*legendLineH)
			name := l.Name
			if i == maxLegend-1 && len(p.Lines) > maxLegend {
				name = fmt.Sprintf("%s (+%d more)", name, len(p.Lines)-maxLegend)
			}
			fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="10" height="3" fill="%s"/>`+"\n", x0+14, ly-4, colour)
			fmt.Fprintf(b, `<text x="%.0f" y="%.0f" %s font-size="10">%s</text>`+"\n", x0+28, ly, fontFamily, esc(name))
		}
	}
}

// niceTicks returns about n round values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var out []float64
	for v := start; v < hi+step*0.999; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	return out
}

// Format writes v in the panel's unit, as Grafana would roughly.
func Format(v float64, unit string) string {
	switch unit {
	case "percentunit":
		return trimFloat(v*100) + "%"
	case "s":
		if math.Abs(v) < 1 && v != 0 {
			return trimFloat(v*1000) + " ms"
		}
		return trimFloat(v) + " s"
	case "reqps":
		return si(v) + " req/s"
	case "ops":
		return si(v) + "/s"
	case "bytes":
		return si(v) + "B"
	}
	return si(v)
}

func si(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimFloat(v/1e9) + "G"
	case a >= 1e6:
		return trimFloat(v/1e6) + "M"
	case a >= 1e3:
		return trimFloat(v/1e3) + "k"
	}
	return trimFloat(v)
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.3g", v)
	if strings.ContainsAny(s, "e") {
		s = fmt.Sprintf("%.2f", v)
	}
	return s
}

// wrap breaks s into lines of at most n characters at spaces.
func wrap(s string, n int) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > n {
			out = append(out, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(out, line)
}

func esc(s string) string { return html.EscapeString(s) }
