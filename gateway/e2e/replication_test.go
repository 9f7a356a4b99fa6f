package e2e

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/olric-data/olric"
	"github.com/olric-data/olric/config"

	"github.com/stargate-router/stargate/gateway/internal/lastcluster"
	"github.com/stargate-router/stargate/gateway/internal/olricnode"
	"github.com/stargate-router/stargate/gateway/internal/session"
)

// hintSessions is how many session hints the kill test writes.
const hintSessions = 2000

// lastClusterDMap is --olric-last-cluster-dmap's default.
const lastClusterDMap = "stargate-last-cluster"

// olricCluster is three gateway processes forming one Olric cluster, with
// no hub behind them: these tests talk to the cluster's store directly, and
// a gateway is ready without its hub.
type olricCluster struct {
	e       *env
	members []olricMember
	secret  string
}

// startOlricCluster starts three gateways, one after another, with
// --olric-replica-count replicas, and waits until each sees three members
// and the partition owners have settled.
func startOlricCluster(t *testing.T, replicas int, flags ...string) *olricCluster {
	e := newEnv(t)
	c := &olricCluster{e: e, secret: e.secret("olric-secret")}
	// Nothing listens on the hub URL: no request is served here.
	h := hub{url: "http://127.0.0.1:9", tokenFile: e.secret("gateway-token")}
	flags = append([]string{"--insecure-no-auth", "--last-cluster-enabled", "--olric-replica-count", strconv.Itoa(replicas)}, flags...)
	var seed []string
	for range 3 {
		m := e.startOlricMember(h, c.secret, seed, flags...)
		if seed == nil {
			seed = []string{m.gossip}
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		waitMetric(t, e, m.metrics, "llm_api_gateway_olric_cluster_members", 3)
	}
	waitPartitionsSettled(t, e, c.metrics(c.members)...)
	return c
}

func (c *olricCluster) metrics(ms []olricMember) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.metrics)
	}
	return out
}

// client is an Olric cluster client dialling member m's data port with the
// shared secret, configured as a gateway configures its own: no client
// retries, the test gateways' routing refresh.
func (c *olricCluster) client(t *testing.T, m olricMember) *olric.ClusterClient {
	t.Helper()
	b, err := os.ReadFile(c.secret)
	if err != nil {
		t.Fatal(err)
	}
	cc := config.NewClient()
	cc.DialTimeout, cc.ReadTimeout, cc.WriteTimeout = time.Second, time.Second, time.Second
	cc.MaxRetries = -1
	cl, err := olric.NewClusterClient([]string{m.data}, olric.WithConfig(cc), olric.WithRoutingTableFetchInterval(olricRoutingRefresh),
		olric.WithPassword(olricnode.Password(strings.TrimSpace(string(b)))), olric.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatalf("cluster client to %s: %v", m.data, err)
	}
	t.Cleanup(func() { _ = cl.Close(context.Background()) })
	return cl
}

// store is the last-cluster store over the DMap, reached through m.
func (c *olricCluster) store(t *testing.T, m olricMember) lastcluster.Olric {
	t.Helper()
	dm, err := c.client(t, m).NewDMap(lastClusterDMap)
	if err != nil {
		t.Fatal(err)
	}
	return lastcluster.Olric{DM: dm}
}

// memberLossBound is how long a survivor may take to drop a SIGKILLed
// member. Memberlist's local profile (1 s probes, suspicion multiplier 3,
// maximum multiplier 6) suspects a silent member for 3 s once another
// member confirms the suspicion, but for up to 18 s when no confirmation
// reaches it; with the probe that finds the member silent that is about
// 20 s, more than waitMetric's 15 s. A gate failed on it once: one
// survivor marked the member dead after 8 s, the other still suspected it
// 13 s after its first failed probe.
const memberLossBound = 30 * time.Second

// killAndSettle SIGKILLs member i (no graceful leave) and waits until the
// survivors see two members and their partition owners have settled. It
// returns the survivors and how long each step took after the kill.
func (c *olricCluster) killAndSettle(t *testing.T, i int) (survivors []olricMember, noticed, settled time.Duration) {
	t.Helper()
	killed := time.Now()
	c.members[i].p.kill()
	for j, m := range c.members {
		if j != i {
			survivors = append(survivors, m)
		}
	}
	for _, m := range survivors {
		waitMetricWithin(t, c.e, m.metrics, "llm_api_gateway_olric_cluster_members", 2, memberLossBound)
	}
	noticed = time.Since(killed)
	waitOwnersAfterLoss(t, c.e, c.metrics(survivors)...)
	return survivors, noticed, time.Since(killed)
}

// waitOwnersAfterLoss is waitPartitionsSettled for the survivors of a
// loss, which may count more than one owner per partition: a member that
// owned a partition holding entries stays in its owner list, next to the
// new owner, until Olric's balancer has moved them and the coordinator's
// next periodic routing update drops it (Olric's default is a minute),
// and reads meanwhile ask both.
func waitOwnersAfterLoss(t *testing.T, e *env, metrics ...string) {
	t.Helper()
	waitOwnersStable(t, e, 30*time.Second, true, metrics...)
}

// hintKey is the store key and cluster id of session i, as the gateway
// derives them for a prompt_cache_key session of the e2e model.
func hintKey(i int) (key, cluster string) {
	id := fmt.Sprintf("conversation-%06d", i)
	return lastcluster.Key("", model, session.Hashed("session", id)), "cluster-" + strconv.Itoa(i%4)
}

// countHints reads every session's hint through the stores in turn and
// returns how many read back with the value written.
func countHints(t *testing.T, stores []lastcluster.Olric) int {
	t.Helper()
	ctx := context.Background()
	found := 0
	for i := range hintSessions {
		key, want := hintKey(i)
		v, ok, err := stores[i%len(stores)].Get(ctx, key)
		if err != nil && !isMiss(err) {
			t.Fatalf("reading session %d: %v", i, err)
		}
		if ok && v == want {
			found++
		}
	}
	return found
}

// isMiss reports a miss that the cluster client returns as an error text:
// Olric turns an error reply into its typed error (olric.ErrKeyNotFound)
// through a table that only a running node fills in, and this test
// process runs none. A gateway, whose node runs in its process, gets the
// typed error.
func isMiss(err error) bool { return strings.Contains(err.Error(), "key not found") }

// TestOlricHintsSurviveGatewayKill: three gateways share the last-cluster
// DMap. Hints for 2000 sessions are written through the store the gateway
// uses (a Put with its TTL, on the partition's owner), spread over the
// three members, and all read back; then one gateway is SIGKILLed and,
// once the survivors have noticed and their partition owners settled,
// every hint is read again through the survivors.
//
// With the default replica count (2) every hint must still be there. The
// replica-count-1 run shows what the test catches: the hints of the
// partitions the dead member owned are gone (about a third). It asserts
// the loss matches the share of partitions that member owned, so a change
// that turned replication off would fail the first subtest and one that
// made the test blind would fail the second.
func TestOlricHintsSurviveGatewayKill(t *testing.T) {
	for _, tc := range []struct {
		replicas int
	}{{2}, {1}} {
		t.Run("replicas="+strconv.Itoa(tc.replicas), func(t *testing.T) {
			c := startOlricCluster(t, tc.replicas)
			ctx := context.Background()
			var writers []lastcluster.Olric
			for _, m := range c.members {
				writers = append(writers, c.store(t, m))
			}
			for i := range hintSessions {
				key, cluster := hintKey(i)
				if err := writers[i%3].Set(ctx, key, cluster, 10*time.Minute); err != nil {
					t.Fatalf("writing session %d: %v", i, err)
				}
			}
			before := countHints(t, writers)
			if before != hintSessions {
				t.Fatalf("before the kill %d of %d hints read back", before, hintSessions)
			}
			const victim = 2
			owned := metric(t, c.e, c.members[victim].metrics, "olric_partitions_primary_owned")
			survivors, noticed, settled := c.killAndSettle(t, victim)
			// Fresh clients: they fetch the settled partition owners.
			var readers []lastcluster.Olric
			for _, m := range survivors {
				readers = append(readers, c.store(t, m))
			}
			after := countHints(t, readers)
			t.Logf("replicas %d: %d of %d hints before the kill, %d after; the killed member owned %v of 23 partitions; survivors saw 2 members %v and settled %v after the SIGKILL",
				tc.replicas, before, hintSessions, after, owned, noticed.Round(time.Millisecond), settled.Round(time.Millisecond))
			if tc.replicas >= 2 {
				if after != hintSessions {
					t.Fatalf("%d of %d hints lost with %d replicas", hintSessions-after, hintSessions, tc.replicas)
				}
				return
			}
			// One copy: the dead member's partitions are gone. Partitions
			// hold different numbers of keys, hence the tolerance.
			lost := hintSessions - after
			want := float64(hintSessions) * owned / 23
			if owned < 1 || float64(lost) < want/2 || float64(lost) > want*1.5 {
				t.Fatalf("lost %d hints with one copy; the dead member owned %v of 23 partitions, about %.0f hints", lost, owned, want)
			}
		})
	}
}

// TestOlricHintWritesThroughKill: hints written by two writers without a
// pause while a third member is SIGKILLed. A write that returned success
// must be readable after the survivors settle, whatever partition it hit
// and whenever it ran; a write that failed (its backup or owner was the
// dead member before the survivors noticed) is what the gateway counts as
// a failed write and is not expected. This is the guarantee the sync
// replication mode gives and the async mode does not.
func TestOlricHintWritesThroughKill(t *testing.T) {
	c := startOlricCluster(t, 2)
	ctx := context.Background()
	writers := []lastcluster.Olric{c.store(t, c.members[0]), c.store(t, c.members[1])}
	var (
		mu       sync.Mutex
		written  = map[int]bool{}
		failed   int
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		attempts int
	)
	for w := range writers {
		wg.Go(func() {
			for i := w; ; i += len(writers) {
				select {
				case <-stop:
					return
				default:
				}
				key, cluster := hintKey(i)
				wctx, cancel := context.WithTimeout(ctx, time.Second)
				err := writers[w].Set(wctx, key, cluster, 10*time.Minute)
				cancel()
				mu.Lock()
				attempts++
				if err == nil {
					written[i] = true
				} else {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	// Let the writers run before the kill: poll until they wrote some.
	if err := poll(10*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(written) < 500 {
			return fmt.Errorf("%d hints written", len(written))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, noticed, settled := c.killAndSettle(t, 2)
	close(stop)
	wg.Wait()
	readers := []lastcluster.Olric{c.store(t, c.members[0]), c.store(t, c.members[1])}
	lost := 0
	for i := range written {
		key, want := hintKey(i)
		v, ok, err := readers[i%2].Get(ctx, key)
		if err != nil && !isMiss(err) {
			t.Fatalf("reading session %d: %v", i, err)
		}
		if !ok || v != want {
			lost++
		}
	}
	t.Logf("%d writes, %d succeeded, %d failed (survivors saw 2 members %v and settled %v after the SIGKILL); %d successful writes lost",
		attempts, len(written), failed, noticed.Round(time.Millisecond), settled.Round(time.Millisecond), lost)
	if lost != 0 {
		t.Fatalf("%d of %d hints whose write returned success were lost", lost, len(written))
	}
}
