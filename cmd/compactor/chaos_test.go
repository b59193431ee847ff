package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/chaos"
)

// TestChaosShort is make chaos's regression test: a short run of the same
// harness (a three-node cluster, two serve processes, runtimes appending
// and requesting while the sessions stream's leader and a replica are
// killed) meets every goal.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster and two serve processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_TEST_RUN_MAIN", "1") // the replicas are this binary running main
	rep, err := chaos.Run(context.Background(), chaos.Options{Binary: exe, Runtimes: 8, Duration: 15 * time.Second, ContextLimit: 1500, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *rep)
	if len(rep.Faults) != 4 {
		t.Fatalf("faults %v, want the leader and the replica killed and restarted", rep.Faults)
	}
	if !rep.Pass() || rep.Requests == 0 || rep.AppendsAcknowledged == 0 {
		t.Fatalf("goals not met:\n%s", rep.Markdown("test"))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
