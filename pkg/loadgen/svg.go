package loadgen

import (
	"fmt"
	"html"
	"math"
	"slices"
	"sort"
	"strings"
)

// Plots are plain SVG 1.1 written by hand: a fixed canvas, linear axes
// with "nice" ticks, one colour per series and a legend.

const (
	plotW, plotH                 = 720, 400
	padL, padR, padT, padB       = 70, 180, 40, 50
	innerW, innerH               = plotW - padL - padR, plotH - padT - padB
	legendX                      = plotW - padR + 15
	fontStyle                    = `font-family="sans-serif" font-size="12"`
	maxPointsPerSeries           = 400
	axisColour, gridColour       = "#333", "#ddd"
	titleSize                    = 14
	defaultPercentileForXAxisMax = 99.5
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// point is one (x, y) of a line.
type point struct{ x, y float64 }

// series is one named line.
type series struct {
	name   string
	points []point
}

// niceTicks returns about n round tick values covering [0, hi].
func niceTicks(hi float64, n int) []float64 {
	if !(hi > 0) || math.IsInf(hi, 0) {
		return []float64{0, 1}
	}
	raw := hi / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ts []float64
	for v := 0.0; v <= hi+step/2; v += step {
		ts = append(ts, v)
	}
	return ts
}

func fmtTick(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return fmt.Sprintf("%d", int64(v))
	}
	return fmt.Sprintf("%.3g", v)
}

// lineChart draws series on axes from 0 to xMax and 0 to yMax.
func lineChart(title, xLabel, yLabel string, ss []series, xMax, yMax float64, step bool) string {
	var b strings.Builder
	xt, yt := niceTicks(xMax, 6), niceTicks(yMax, 5)
	xMax, yMax = xt[len(xt)-1], yt[len(yt)-1]
	sx := func(x float64) float64 { return padL + min(max(x/xMax, 0), 1)*innerW }
	sy := func(y float64) float64 { return padT + innerH - min(max(y/yMax, 0), 1)*innerH }
	header(&b, title)
	for _, t := range xt {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", sx(t), padT, sx(t), padT+innerH, gridColour)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" %s>%s</text>`+"\n", sx(t), padT+innerH+18, fontStyle, fmtTick(t))
	}
	for _, t := range yt {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, sy(t), padL+innerW, sy(t), gridColour)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" %s>%s</text>`+"\n", padL-6, sy(t)+4, fontStyle, fmtTick(t))
	}
	axes(&b, xLabel, yLabel)
	for i, s := range ss {
		colour := palette[i%len(palette)]
		if len(s.points) > 0 {
			var path strings.Builder
			for k, p := range s.points {
				switch {
				case k == 0:
					fmt.Fprintf(&path, "M%.1f %.1f", sx(p.x), sy(p.y))
				case step:
					fmt.Fprintf(&path, " H%.1f V%.1f", sx(p.x), sy(p.y))
				default:
					fmt.Fprintf(&path, " L%.1f %.1f", sx(p.x), sy(p.y))
				}
			}
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", path.String(), colour)
		}
		legend(&b, i, s.name, colour)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func header(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(b, `<text x="%d" y="24" font-family="sans-serif" font-size="%d" font-weight="bold">%s</text>`+"\n", padL, titleSize, html.EscapeString(title))
}

func axes(b *strings.Builder, xLabel, yLabel string) {
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", padL, padT+innerH, padL+innerW, padT+innerH, axisColour)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", padL, padT, padL, padT+innerH, axisColour)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" %s>%s</text>`+"\n", padL+innerW/2, plotH-10, fontStyle, html.EscapeString(xLabel))
	fmt.Fprintf(b, `<text x="16" y="%d" text-anchor="middle" transform="rotate(-90 16 %d)" %s>%s</text>`+"\n", padT+innerH/2, padT+innerH/2, fontStyle, html.EscapeString(yLabel))
}

func legend(b *strings.Builder, i int, name, colour string) {
	y := padT + 10 + i*18
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", legendX, y-10, colour)
	fmt.Fprintf(b, `<text x="%d" y="%d" %s>%s</text>`+"\n", legendX+18, y, fontStyle, html.EscapeString(name))
}

// TTFTCDF plots the empirical CDF of each named set of TTFTs (ms), one
// line per set (one per arm in a campaign). The x axis ends at the
// largest set's p99.5 so one straggler does not flatten the curves.
func TTFTCDF(title string, sets map[string][]float64) string {
	names := make([]string, 0, len(sets))
	for k := range sets {
		names = append(names, k)
	}
	sort.Strings(names)
	xMax := 0.0
	var ss []series
	for _, name := range names {
		vs := slices.Clone(sets[name])
		slices.Sort(vs)
		xMax = max(xMax, Percentile(vs, defaultPercentileForXAxisMax))
		s := series{name: fmt.Sprintf("%s (n=%d)", name, len(vs))}
		// Thin to at most maxPointsPerSeries steps, keeping the last.
		stride := max(len(vs)/maxPointsPerSeries, 1)
		if len(vs) > 0 {
			s.points = append(s.points, point{0, 0})
		}
		for k := 0; k < len(vs); k += stride {
			s.points = append(s.points, point{vs[k], float64(k+1) / float64(len(vs))})
		}
		if n := len(vs); n > 0 && s.points[len(s.points)-1].y != 1 {
			s.points = append(s.points, point{vs[n-1], 1})
		}
		ss = append(ss, s)
	}
	return lineChart(title, "TTFT (ms)", "fraction of requests", ss, xMax, 1, true)
}

// ClusterShareOverTime plots, for each serving cluster, its share of the
// successful requests started in each of slots equal time slices.
func ClusterShareOverTime(title string, records []Record, slots int) string {
	end := 0.0
	clusters := map[string]bool{}
	for i := range records {
		if records[i].Outcome == OutcomeOK {
			end = max(end, records[i].StartMs)
			clusters[records[i].Cluster] = true
		}
	}
	width := max(end/float64(slots), 1)
	counts := make([]map[string]int, slots)
	totals := make([]int, slots)
	for i := range counts {
		counts[i] = map[string]int{}
	}
	for i := range records {
		r := &records[i]
		if r.Outcome != OutcomeOK {
			continue
		}
		k := min(int(r.StartMs/width), slots-1)
		counts[k][r.Cluster]++
		totals[k]++
	}
	names := make([]string, 0, len(clusters))
	for c := range clusters {
		names = append(names, c)
	}
	sort.Strings(names)
	var ss []series
	for _, c := range names {
		label := c
		if label == "" {
			label = "(unknown)"
		}
		s := series{name: label}
		for k := range slots {
			if totals[k] > 0 {
				s.points = append(s.points, point{(float64(k) + 0.5) * width / 1000, 100 * float64(counts[k][c]) / float64(totals[k])})
			}
		}
		ss = append(ss, s)
	}
	return lineChart(title, "time since start (s)", "share of requests (%)", ss, max(end/1000, 1), 100, false)
}

// BarChart plots grouped bars: one group per category, one bar per
// series (an arm), values 0..yMax (yMax 0 = fit the data).
func BarChart(title, yLabel string, categories, seriesNames []string, values [][]float64, yMax float64) string {
	var b strings.Builder
	for _, row := range values {
		for _, v := range row {
			yMax = max(yMax, v)
		}
	}
	yt := niceTicks(yMax, 5)
	yMax = yt[len(yt)-1]
	sy := func(y float64) float64 { return padT + innerH - min(max(y/yMax, 0), 1)*innerH }
	header(&b, title)
	for _, t := range yt {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, sy(t), padL+innerW, sy(t), gridColour)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" %s>%s</text>`+"\n", padL-6, sy(t)+4, fontStyle, fmtTick(t))
	}
	axes(&b, "", yLabel)
	group := float64(innerW) / float64(max(len(categories), 1))
	barW := group * 0.8 / float64(max(len(seriesNames), 1))
	for c, cat := range categories {
		x0 := padL + float64(c)*group + group*0.1
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" %s>%s</text>`+"\n", padL+(float64(c)+0.5)*group, padT+innerH+18, fontStyle, html.EscapeString(cat))
		for s := range seriesNames {
			if s >= len(values) || c >= len(values[s]) {
				continue
			}
			v := values[s][c]
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %.1f</title></rect>`+"\n",
				x0+float64(s)*barW, sy(v), barW*0.95, sy(0)-sy(v), palette[s%len(palette)], html.EscapeString(seriesNames[s]), html.EscapeString(cat), v)
		}
	}
	for s, name := range seriesNames {
		legend(&b, s, name, palette[s%len(palette)])
	}
	b.WriteString("</svg>\n")
	return b.String()
}
