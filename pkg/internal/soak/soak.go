package soak

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Sample is one scrape of one process.
type Sample struct {
	// At is the time since the load started.
	At         time.Duration
	Process    string
	RSSBytes   float64
	Goroutines float64
	// HeapInuseBytes, HeapReleasedBytes and SysBytes are the Go runtime's
	// view (go_memstats_*), recorded so that growth in RSS can be told
	// apart from growth of the live heap; the verdict does not use them.
	HeapInuseBytes, HeapReleasedBytes, SysBytes float64
	// OlricEntries and OlricAllocatedBytes are the gateway's Olric
	// storage (olric_storage_*, summed over its DMaps); 0 elsewhere.
	OlricEntries, OlricAllocatedBytes float64
}

// Bounds say how much growth still counts as flat. A process's memory and
// goroutines move with the load at the moment of a scrape, so the verdict
// compares medians of a few samples at the start and at the end of the
// measured window, the medians of its middle and last thirds, and the idle
// counts before and after the load.
type Bounds struct {
	// Warmup is excluded: caches, pools and the Olric tables fill up.
	Warmup time.Duration
	// Window is how many samples each median takes.
	Window int
	// RSSRatio and RSSSlackBytes: the end median may exceed the start
	// median by RSSRatio of it plus RSSSlackBytes.
	RSSRatio      float64
	RSSSlackBytes float64
	// TailRatio and TailSlackBytes: the median of the last third of the
	// measured window may exceed the median of its middle third by
	// TailRatio of it plus TailSlackBytes. A structure that fills and
	// levels off (a cache, a store whose entries expire) grows less and
	// less and passes; one that still grows at the same pace at the end
	// fails, even when it stayed within the RSS bound over the whole
	// window, as a slow leak in a short run does.
	TailRatio      float64
	TailSlackBytes float64
	// GoroutineSlack: after the load, with the client's connections
	// closed, a process may hold this many more goroutines than before it.
	GoroutineSlack float64
	// IdleWait is how long after the load the idle count is taken:
	// longer than the idle timeouts of the keep-alive pools between the
	// tiers (90 s clients, 120 s servers), so pooled connections and their
	// goroutines are gone and what remains is a leak.
	IdleWait time.Duration
}

// DefaultBounds are the bounds make soak applies: 5 minutes of warm-up,
// medians of 3 samples, 15 % + 8 MiB of memory growth over the measured
// window and 3 % + 2 MiB from its middle third to its last, 5 goroutines
// counted 150 s after the load.
func DefaultBounds() Bounds {
	return Bounds{Warmup: 5 * time.Minute, Window: 3, RSSRatio: 0.15, RSSSlackBytes: 8 << 20,
		TailRatio: 0.03, TailSlackBytes: 2 << 20, GoroutineSlack: 5, IdleWait: 150 * time.Second}
}

// Verdict is one process's result.
type Verdict struct {
	Process string
	// Samples after the warm-up.
	Samples int
	// RSS medians at the start and end of the measured window, and the
	// largest sample after the warm-up.
	RSSStart, RSSEnd, RSSMax float64
	// RSS medians of the middle and last thirds of the measured window.
	RSSMiddle, RSSTail float64
	// Goroutine medians during load, and the idle counts around it.
	GoroutinesStart, GoroutinesEnd float64
	IdleBefore, IdleAfter          float64
	Problems                       []string
}

// Flat reports whether the process passed.
func (v Verdict) Flat() bool { return len(v.Problems) == 0 }

// Judge decides per process. idleBefore and idleAfter are goroutine counts
// scraped with no load (before it and after it, once the load's client
// closed its connections); a process missing from them is judged on its
// memory only.
func Judge(samples []Sample, idleBefore, idleAfter map[string]float64, b Bounds) []Verdict {
	byProc := map[string][]Sample{}
	for _, s := range samples {
		if s.At >= b.Warmup {
			byProc[s.Process] = append(byProc[s.Process], s)
		}
	}
	var out []Verdict
	for _, p := range slices.Sorted(maps.Keys(byProc)) {
		ss := byProc[p]
		slices.SortFunc(ss, func(a, c Sample) int { return cmp.Compare(a.At, c.At) })
		v := Verdict{Process: p, Samples: len(ss)}
		if len(ss) < 2*b.Window {
			v.Problems = append(v.Problems, fmt.Sprintf("%d samples after the warm-up, need %d", len(ss), 2*b.Window))
			out = append(out, v)
			continue
		}
		rss := func(s Sample) float64 { return s.RSSBytes }
		gor := func(s Sample) float64 { return s.Goroutines }
		v.RSSStart, v.RSSEnd = median(ss[:b.Window], rss), median(ss[len(ss)-b.Window:], rss)
		v.GoroutinesStart, v.GoroutinesEnd = median(ss[:b.Window], gor), median(ss[len(ss)-b.Window:], gor)
		for _, s := range ss {
			v.RSSMax = max(v.RSSMax, s.RSSBytes)
		}
		if limit := v.RSSStart*(1+b.RSSRatio) + b.RSSSlackBytes; v.RSSEnd > limit {
			v.Problems = append(v.Problems, fmt.Sprintf("memory grew from %s to %s (bound %s)", mib(v.RSSStart), mib(v.RSSEnd), mib(limit)))
		}
		n := len(ss)
		v.RSSMiddle, v.RSSTail = median(ss[n/3:2*n/3], rss), median(ss[2*n/3:], rss)
		if limit := v.RSSMiddle*(1+b.TailRatio) + b.TailSlackBytes; v.RSSTail > limit {
			v.Problems = append(v.Problems, fmt.Sprintf("memory still growing: %s in the middle third, %s in the last (bound %s)",
				mib(v.RSSMiddle), mib(v.RSSTail), mib(limit)))
		}
		before, okB := idleBefore[p]
		after, okA := idleAfter[p]
		v.IdleBefore, v.IdleAfter = before, after
		if okB && okA && after > before+b.GoroutineSlack {
			v.Problems = append(v.Problems, fmt.Sprintf("idle goroutines %v before the load, %v after it (bound +%v)", before, after, b.GoroutineSlack))
		}
		out = append(out, v)
	}
	return out
}

func median(ss []Sample, f func(Sample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// Load is what the soak's client saw.
type Load struct {
	Suite                string
	Duration             time.Duration
	Requests, OK         int
	Failed, Aborted      int
	Retries              int
	AchievedRate         float64
	TTFTp50Ms, TTFTp99Ms float64
	ReturningCacheHitPct float64
}

// WriteReport writes the markdown report: the load, then one row per
// process, then the verdict.
func WriteReport(w io.Writer, title string, l Load, vs []Verdict, b Bounds) bool {
	ok := l.Failed == 0 && l.Aborted == 0
	fmt.Fprintf(w, "# %s\n\n", title)
	fmt.Fprintf(w, "| load | |\n| --- | --- |\n")
	fmt.Fprintf(w, "| suite | %s for %s through the gateway, streamed |\n", l.Suite, l.Duration)
	fmt.Fprintf(w, "| requests | %d due, %d ok, %d failed, %d aborted, %d client retries |\n", l.Requests, l.OK, l.Failed, l.Aborted, l.Retries)
	fmt.Fprintf(w, "| rate | %.2f req/s achieved |\n", l.AchievedRate)
	fmt.Fprintf(w, "| TTFT | p50 %.0f ms, p99 %.0f ms |\n", l.TTFTp50Ms, l.TTFTp99Ms)
	fmt.Fprintf(w, "| returning-turn cache hit | %.1f %% of prompt tokens |\n\n", l.ReturningCacheHitPct)
	fmt.Fprintf(w, "After %s of warm-up; memory is the median of %d samples at the start and the end of the rest (bound %.0f %% + %s), "+
		"and the median of its middle and last thirds (bound %.0f %% + %s); idle goroutines are counted before the load and %s after it, the client's connections closed.\n\n",
		b.Warmup, b.Window, 100*b.RSSRatio, mib(b.RSSSlackBytes), 100*b.TailRatio, mib(b.TailSlackBytes), b.IdleWait)
	fmt.Fprintf(w, "| process | samples | RSS start | RSS end | RSS max | RSS middle / last third | goroutines under load (start / end) | idle goroutines (before / after) | result |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, v := range vs {
		res := "flat"
		if !v.Flat() {
			res = "**" + joinProblems(v.Problems) + "**"
			ok = false
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s / %s | %.0f / %.0f | %.0f / %.0f | %s |\n", v.Process, v.Samples,
			mib(v.RSSStart), mib(v.RSSEnd), mib(v.RSSMax), mib(v.RSSMiddle), mib(v.RSSTail), v.GoroutinesStart, v.GoroutinesEnd,
			v.IdleBefore, v.IdleAfter, res)
	}
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\nResult: **%s** (0 failed or aborted requests, and every process flat).\n", verdict)
	return ok
}

func joinProblems(ps []string) string { return strings.Join(ps, "; ") }
