package olricnode

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/olric-data/olric/config"
)

// TestReplicationSettingsReachOlric: the gateway's replication settings
// become Olric's, zero quorums and an empty mode take Olric's defaults,
// MemberCountQuorum stays 1 whatever the replica count, and an unknown
// mode is refused with its value named.
func TestReplicationSettingsReachOlric(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	base := Config{Env: "local", BindAddr: "127.0.0.1", MemberlistBindAddr: "127.0.0.1", PartitionCount: 23, TableSize: 1 << 14, LogLevel: "WARN"}
	for _, tc := range []struct {
		name                          string
		replicas, read, write         int
		mode                          string
		repair                        bool
		wantRead, wantWrite, wantMode int
	}{
		{"defaults", 2, 0, 0, "", false, 1, 1, config.SyncReplicationMode},
		{"three copies, quorum 2, async", 3, 2, 2, "async", true, 2, 2, config.AsyncReplicationMode},
		{"sync by name", 2, 1, 1, "sync", false, 1, 1, config.SyncReplicationMode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.ReplicaCount, cfg.ReadQuorum, cfg.WriteQuorum, cfg.ReplicationMode, cfg.ReadRepair = tc.replicas, tc.read, tc.write, tc.mode, tc.repair
			c, err := olricConfig(cfg, log)
			if err != nil {
				t.Fatal(err)
			}
			if c.ReplicaCount != tc.replicas || c.ReadQuorum != tc.wantRead || c.WriteQuorum != tc.wantWrite ||
				c.ReplicationMode != tc.wantMode || c.ReadRepair != tc.repair || c.MemberCountQuorum != 1 {
				t.Fatalf("olric config: replicas %d, read %d, write %d, mode %d, repair %v, member quorum %d",
					c.ReplicaCount, c.ReadQuorum, c.WriteQuorum, c.ReplicationMode, c.ReadRepair, c.MemberCountQuorum)
			}
			if err := c.Sanitize(); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Olric refuses the configuration: %v", err)
			}
		})
	}
	cfg := base
	cfg.ReplicationMode = "eventual"
	if _, err := olricConfig(cfg, log); err == nil || !strings.Contains(err.Error(), `"eventual"`) {
		t.Fatalf("unknown mode: err = %v", err)
	}
}
