package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
)

// cluster starts three JetStream servers routed to each other in process
// and waits for a meta leader.
func cluster(t *testing.T) []*server.Server {
	t.Helper()
	ports := []int{freePort(t), freePort(t), freePort(t)}
	var routes []*url.URL
	for _, p := range ports {
		u, _ := url.Parse(fmt.Sprintf("nats-route://127.0.0.1:%d", p))
		routes = append(routes, u)
	}
	var servers []*server.Server
	for i, p := range ports {
		s, err := server.NewServer(&server.Options{ServerName: fmt.Sprintf("N%d", i+1), Host: "127.0.0.1", Port: -1, JetStream: true,
			StoreDir: t.TempDir(), Cluster: server.ClusterOpts{Name: "TEST", Host: "127.0.0.1", Port: p}, Routes: routes, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		servers = append(servers, s)
	}
	// A node is ready once its JetStream has joined the others: a minute,
	// where other packages' tests load the machine.
	for _, s := range servers {
		if !s.ReadyForConnections(time.Minute) {
			t.Fatal("cluster node not ready within a minute")
		}
	}
	natstest.Eventually(t, 60*time.Second, 100*time.Millisecond, func() error {
		for _, s := range servers {
			if s.JetStreamIsLeader() {
				return nil
			}
		}
		return errors.New("no JetStream meta leader")
	})
	return servers
}

// TestReplicasOnCluster: on a three-node cluster, provision --replicas 3
// makes every stream, bucket and the consumer R3, and the service compacts
// against it.
func TestReplicasOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster")
	}
	servers := cluster(t)
	url := servers[0].ClientURL()
	var code int
	for try := 0; try < 10; try++ { // the cluster may still be placing its first assets
		if code = cli(t, url, nil, "provision", "--replicas", "3"); code == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if code != 0 {
		t.Fatal("provision --replicas 3 failed")
	}
	nc, err := nats.Connect(servers[1].ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// A JetStream API request to a node of a cluster that is still
	// settling (under the race detector, on two busy cores) can go
	// unanswered: each read is tried again, for a minute in all.
	retry := func(what string, f func(ctx context.Context) error) {
		t.Helper()
		natstest.Eventually(t, time.Minute, 500*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := f(ctx); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			return nil
		})
	}
	for _, name := range []string{consumer.RequestStream, consumer.ResultStream, consumer.DLQStream, "KV_" + kvstore.MetaBucket, "KV_" + kvstore.BreakersBucket, kvstore.DataStream(0), "KV_" + kvstore.RecordsBucket(0)} {
		var info *jetstream.StreamInfo
		retry("stream "+name, func(ctx context.Context) error {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return err
			}
			if info, err = st.Info(ctx); err == nil && info.Config.Replicas == 3 && (info.Cluster == nil || len(info.Cluster.Replicas) != 2) {
				return fmt.Errorf("replicas still being placed: %+v", info.Cluster)
			}
			return err
		})
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Fatalf("stream %s: %d replicas configured, cluster %+v", name, info.Config.Replicas, info.Cluster)
		}
	}
	var c jetstream.Consumer
	retry("consumer", func(ctx context.Context) (err error) {
		c, err = js.Consumer(ctx, consumer.RequestStream, consumer.Durable)
		return err
	})
	if c.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("consumer: %d replicas", c.CachedInfo().Config.Replicas)
	}

	startServe(t, url, "--replicas", "3")
	if cli(t, url, nil, "session", "import", fixture, "--session-id", "r3", "--context-limit", "6000") != 0 {
		t.Fatal("import failed")
	}
	var res map[string]any
	if code := cli(t, servers[2].ClientURL(), &res, "compact", "r3", "--timeout", "60s"); code != 0 || res["outcome"] != "compacted" {
		t.Fatalf("compact on the cluster: exit %d %v", code, res)
	}
}
