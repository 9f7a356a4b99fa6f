package soak

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func series(proc string, rss func(i int) float64, gor func(i int) float64, n int) []Sample {
	var out []Sample
	for i := range n {
		out = append(out, Sample{At: time.Duration(i) * 30 * time.Second, Process: proc, RSSBytes: rss(i), Goroutines: gor(i)})
	}
	return out
}

func TestJudge(t *testing.T) {
	b := DefaultBounds()
	const mb = 1 << 20
	var all []Sample
	// Flat with noise and a warm-up climb that is excluded.
	all = append(all, series("flat", func(i int) float64 {
		if i < 10 {
			return float64(20+5*i) * mb
		}
		return float64(70+i%3) * mb
	}, func(i int) float64 { return float64(40 + i%7) }, 60)...)
	// A leak: 1 MiB per sample after the warm-up, 50 MiB over 50 samples.
	all = append(all, series("leak", func(i int) float64 { return float64(100+i) * mb }, func(int) float64 { return 30 }, 60)...)
	// Too short a run to judge.
	all = append(all, series("short", func(int) float64 { return mb }, func(int) float64 { return 1 }, 12)...)
	// A slow leak: 0.25 MiB per sample, 12 MiB over the measured window,
	// within the 15 % + 8 MiB bound but still growing at the end.
	all = append(all, series("slow", func(i int) float64 { return (40 + 0.25*float64(i)) * mb }, func(int) float64 { return 30 }, 60)...)
	// A cache that fills for 10 minutes after the warm-up, by 10 MiB, and
	// then stays: it grows nearly as much, but not at the end.
	all = append(all, series("fills", func(i int) float64 { return (40 + 0.5*float64(min(max(i, 10), 30)-10)) * mb },
		func(int) float64 { return 30 }, 60)...)
	idleBefore := map[string]float64{"flat": 20, "leak": 20, "goroutines": 20}
	idleAfter := map[string]float64{"flat": 24, "leak": 20}
	// Flat memory but goroutines left behind after the load.
	all = append(all, series("goroutines", func(int) float64 { return 50 * mb }, func(int) float64 { return 60 }, 60)...)
	idleAfter["goroutines"] = 26

	vs := Judge(all, idleBefore, idleAfter, b)
	got := map[string]Verdict{}
	for _, v := range vs {
		got[v.Process] = v
	}
	if v := got["flat"]; !v.Flat() || v.RSSStart != 70*mb && v.RSSStart != 71*mb {
		t.Errorf("flat: %+v", v)
	}
	if v := got["leak"]; v.Flat() || !strings.Contains(v.Problems[0], "memory grew") {
		t.Errorf("leak: %+v", v)
	}
	if v := got["short"]; v.Flat() || !strings.Contains(v.Problems[0], "samples after the warm-up") {
		t.Errorf("short: %+v", v)
	}
	if v := got["goroutines"]; v.Flat() || !strings.Contains(v.Problems[0], "idle goroutines 20 before the load, 26 after") {
		t.Errorf("goroutines: %+v", v)
	}
	if v := got["slow"]; v.Flat() || len(v.Problems) != 1 || !strings.Contains(v.Problems[0], "memory still growing") {
		t.Errorf("slow: %+v", v)
	}
	if v := got["fills"]; !v.Flat() || v.RSSEnd-v.RSSStart < 9*mb {
		t.Errorf("fills: %+v", v)
	}
	if got["leak"].RSSMax != 159*mb {
		t.Errorf("leak max = %v", got["leak"].RSSMax/mb)
	}
}

func TestWriteReport(t *testing.T) {
	b := DefaultBounds()
	flat := []Verdict{{Process: "hub", Samples: 50, RSSStart: 1 << 25, RSSEnd: 1 << 25}}
	var buf bytes.Buffer
	if !WriteReport(&buf, "soak", Load{Requests: 10, OK: 10}, flat, b) || !strings.Contains(buf.String(), "**PASS**") {
		t.Fatalf("flat run: %s", buf.String())
	}
	buf.Reset()
	if WriteReport(&buf, "soak", Load{Requests: 10, OK: 9, Failed: 1}, flat, b) || !strings.Contains(buf.String(), "**FAIL**") {
		t.Fatalf("a failed request must fail the soak: %s", buf.String())
	}
	buf.Reset()
	leak := []Verdict{{Process: "gateway", Problems: []string{"memory grew"}}}
	if WriteReport(&buf, "soak", Load{Requests: 10, OK: 10}, leak, b) || !strings.Contains(buf.String(), "**memory grew**") {
		t.Fatalf("a leaking process must fail the soak: %s", buf.String())
	}
}
