package app_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func probe(addr, path string) (int, string) {
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// A whole cluster restarted (a host reboot, an upgrade): a replica started
// while JetStream has no leaders yet answers /livez at once, says on
// /readyz what it waits for, and serves within seconds of the leaders
// being back. Before, one stream info request sent to a stream with no
// leader was never answered and the start waited on it for its whole two
// minutes, then exited.
func TestStartsWhileTheClusterElectsLeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster")
	}
	c := natstest.Cluster(t)
	nc, js := natstest.ConnectURL(t, c.URLs())
	natstest.Eventually(t, 2*time.Minute, time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return app.ProvisionAll(ctx, nc, js, app.Provisioning{Replicas: 3, Shards: 1})
	})
	nc.Close()
	c.Shutdown()
	// One node of three: a node but no quorum, so no stream has a leader.
	if err := c.Restart(0); err != nil {
		t.Fatal(err)
	}

	counter, _ := tokens.ForEncoding("cl100k_base")
	addr := freeAddr(t)
	type started struct {
		a   *app.App
		err error
	}
	ready := make(chan started, 1)
	go func() {
		a, err := app.Start(context.Background(), app.Config{NATSURL: c.URLs(), Provision: true, Replicas: 3, Shards: 1,
			MetricsAddr: addr, Pipeline: pipeline.DefaultConfig(), Summarizer: extractive.New(counter)})
		ready <- started{a, err}
	}()
	natstest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if code, body := probe(addr, "/livez"); code != 200 {
			return fmt.Errorf("/livez answered %d %q while starting", code, body)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // long enough for a request to go unanswered
	if code, body := probe(addr, "/readyz"); code != 503 || !strings.Contains(body, "starting") {
		t.Fatalf("/readyz answered %d %q while JetStream has no leaders, want 503 saying it is starting", code, body)
	}

	for i := 1; i < 3; i++ {
		if err := c.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"KV_" + kvstore.MetaBucket, "KV_" + kvstore.BreakersBucket, "KV_" + kvstore.RecordsBucket(0), kvstore.DataStream(0),
		consumer.RequestStream, consumer.ResultStream, consumer.DLQStream}
	natstest.Eventually(t, 2*time.Minute, 50*time.Millisecond, func() error {
		for _, n := range names {
			if c.StreamLeader(n) < 0 {
				return fmt.Errorf("no leader for %s", n)
			}
		}
		return nil
	})
	leaders := time.Now()
	var s started
	select {
	case s = <-ready:
	case <-time.After(2 * time.Minute):
		t.Fatal("the service did not start within 2 minutes of the cluster's leaders being back")
	}
	if s.err != nil {
		t.Fatalf("the service did not start: %v", s.err)
	}
	t.Cleanup(func() { _ = s.a.Stop() })
	natstest.Eventually(t, time.Minute, 50*time.Millisecond, func() error {
		if code, body := probe(addr, "/readyz"); code != 200 {
			return fmt.Errorf("/readyz %d %q", code, body)
		}
		return nil
	})
	took := time.Since(leaders)
	t.Logf("serving %v after every stream had a leader", took.Round(time.Millisecond))
	// The goal is 15 s (make chaos measures it); twice that here, where the
	// race detector and the other packages' tests share two cores.
	if took > 30*time.Second {
		t.Fatalf("serving %v after the leaders were back, want within 15 s", took)
	}
	rc, _ := natstest.ConnectURL(t, c.URLs())
	if m, err := rc.Request(contract.SubjectCreate, []byte(`{"session_id":"after-restart","messages":[{"role":"user","content":"hello"}]}`), 30*time.Second); err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("create after the restart: %v %v", err, m)
	}
}
