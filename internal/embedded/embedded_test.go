package embedded_test

import (
	"testing"
	"time"

	"github.com/compactor/compactor/internal/embedded"
)

// The embedded server is one node with no replica: a write it acknowledges
// is on disk (fsync per write) unless a sync interval is asked for (issue
// 42: nats-server's default synced every 2 minutes). A cluster's nodes
// sync every second.
func TestEmbeddedSync(t *testing.T) {
	for _, tc := range []struct {
		interval time.Duration
		always   bool
	}{{0, true}, {time.Second, false}} {
		s, err := embedded.Start(embedded.Options{Port: -1, DataDir: t.TempDir(), SyncInterval: tc.interval})
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.JetStreamConfig()
		embedded.Stop(s)
		if cfg.SyncAlways != tc.always || !tc.always && cfg.SyncInterval != tc.interval {
			t.Fatalf("SyncInterval %v: the server syncs always %v, every %v", tc.interval, cfg.SyncAlways, cfg.SyncInterval)
		}
	}
	c, err := embedded.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	for i, n := range c.Nodes {
		if cfg := n.JetStreamConfig(); cfg.SyncAlways || cfg.SyncInterval != embedded.ClusterSyncInterval {
			t.Fatalf("node %d syncs always %v, every %v", i+1, cfg.SyncAlways, cfg.SyncInterval)
		}
	}
}
