package routepage

import (
	"strconv"
	"testing"
	"time"

	"github.com/stargate-router/stargate/hub/internal/routelog"
	"github.com/stargate-router/stargate/hub/internal/routing"
)

// BenchmarkBuild is one poll of the page against a full default ring: 65,536
// records inside the window, 4,096 sessions of 16 turns over 8 clusters,
// every tenth request prefix-aware. It is the hub's cost per open page per
// second.
func BenchmarkBuild(b *testing.B) {
	l := routelog.New(routelog.DefaultRecords)
	clusters := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for i := range routelog.DefaultRecords {
		s := i % 4096
		e := routelog.Entry{Request: routelog.Request{At: now.Add(-time.Duration(routelog.DefaultRecords-i) * 5 * time.Millisecond),
			Duration: 800 * time.Millisecond, Model: "m", Algorithm: "pulsar-wait-and-widen",
			Cluster: clusters[(s+i/40000)%8], Hint: clusters[s%8],
			Class: routing.SessionReturning, Selection: routelog.SelectionPrimary, RankDepth: 1, Status: 200},
			Session: "session-" + strconv.Itoa(s)}
		if i%10 == 0 {
			e.Prefix, e.PrefixTier, e.PrefixBlocks = uint64(i%50+1), routing.PrefixTierCache, 40
		}
		l.Append(e)
	}
	q := Query{WindowSeconds: MaxWindowSeconds, Sessions: DefaultSessions, Turns: DefaultTurns}
	b.ReportAllocs()
	for b.Loop() {
		v := Build(Input{HubID: "h", Now: now, Query: q, Log: l, Fleet: twoRegions()})
		if v.Records.InWindow != routelog.DefaultRecords {
			b.Fatalf("in window %d", v.Records.InWindow)
		}
	}
}
