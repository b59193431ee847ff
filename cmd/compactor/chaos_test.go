package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/harness/chaos"
)

// TestChaosShort is make chaos's regression test: a short run of the same
// harness (a three-node cluster, two serve processes, runtimes appending
// and requesting, a hostile runtime, while the model is down, the meta
// leader and the leaders of the session data and records, the requests
// and events streams and the breakers are killed, a replica is killed and
// the other paused; then the whole cluster restarted, and a store filled)
// meets every goal. A missed goal is named with its figures.
//
// It runs in make test's second pass, without the race detector: its
// replicas are this test binary, and built with the race detector they
// are several times slower (the harness measures them under faults).
func TestChaosShort(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs a cluster and two serve processes: make test's second pass runs it")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_TEST_RUN_MAIN", "1") // the replicas are this binary running main
	rep, err := chaos.Run(context.Background(), chaos.Options{Binary: exe, Runtimes: 8, Duration: 30 * time.Second, ContextLimit: 1500,
		Outage: 3 * time.Second, Pause: 10 * time.Second, BreakerCooldown: 8 * time.Second, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *rep)
	faults := strings.Join(rep.Faults, "\n")
	for _, want := range []string{"model outage", "the JetStream meta leader", "SESSIONS_0", "KV_sessions_0", "AGENT_CONTEXT", "COMPACTION_EVENTS",
		"KV_compaction_breakers", "killed replica 1", "paused replica 2", "resumed replica 2", "whole-cluster restart", "both replicas ready"} {
		if !strings.Contains(faults, want) {
			t.Fatalf("no fault %q in:\n%s", want, faults)
		}
	}
	if n := strings.Count(faults, "restarted node"); n != 6 {
		t.Fatalf("%d nodes restarted current, want the six killed:\n%s", n, faults)
	}
	if !rep.Pass() {
		t.Fatalf("goals missed: %s\n%s", rep.Missed(), rep.Markdown("test"))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// TestChaosFailsOnABrokenBuild: `compactor chaos` against a deliberately
// broken build (go build -tags chaosbroken: every second result event
// are dropped while their publish reports success) exits 1 and names the
// goal it missed with its figures. A harness that cannot fail proves
// nothing. (Run in make test's second pass, without the race detector: it
// builds the binary.)
func TestChaosFailsOnABrokenBuild(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("builds a binary and runs a cluster: make test's second pass runs it")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("skipping: no go toolchain to build the broken binary: %v", err)
	}
	broken := filepath.Join(t.TempDir(), "compactor-broken")
	build := exec.Command(goBin, "build", "-tags", "chaosbroken", "-o", broken, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the broken binary: %v\n%s", err, out)
	}
	code, _, stderr := runCLI(t, "chaos", "--binary", broken, "--runtimes", "6", "--duration", "12s", "--context-limit", "800", "--outage", "1s", "--pause", "3s", "--drain", "15s", "--out", "", "--json")
	if code != 1 || !strings.Contains(stderr, "goals missed: ") || !strings.Contains(stderr, "every request has its outcome in the stream: ") {
		t.Fatalf("chaos on a broken build: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestNoisyShort: `compactor chaos --noisy` in short: on the repo's
// nats.conf, with two replicas, tenant B's compactions all succeed alone,
// beside tenant A's flood of requests within its quotas, beside its flood
// of appends and beside the same requests with the quotas lifted (reloaded
// on SIGHUP); the quotas refuse A's excess, and lifted refuse none; A
// writing sessions and bytes as fast as it can stays within 10 % of those
// quotas. The latency goals are make chaos's (a loaded machine here).
// Like TestChaosShort it runs in make test's second pass.
func TestNoisyShort(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs a server and two serve processes: make test's second pass runs it")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("COMPACTOR_TEST_RUN_MAIN", "1")
	rep, err := chaos.RunNoisy(context.Background(), chaos.NoisyOptions{Binary: exe, NATSConf: "../../nats.conf", Phase: 3 * time.Second,
		Quiet: 3, Flood: 40, AppendFlood: 200, Progress: testWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", *rep)
	if rep.Alone.N == 0 || rep.Beside.N == 0 || rep.Unprotected.N == 0 || rep.QuietFailures != 0 || len(rep.Errors) != 0 {
		t.Fatalf("tenant B: %+v", *rep)
	}
	if rep.FloodRefused["requests_per_second"] == 0 || rep.FloodStored == 0 || rep.FloodStored >= rep.FloodSent {
		t.Fatalf("A's quotas refused none of its flood: %+v", *rep)
	}
	if rep.UnprotectedSent == 0 || rep.UnprotectedStored+rep.UnprotectedFailed != rep.UnprotectedSent || rep.UnprotectedStored == 0 {
		t.Fatalf("with its quotas lifted A's requests were refused: %d of %d answered, %d failed", rep.UnprotectedStored, rep.UnprotectedSent, rep.UnprotectedFailed)
	}
	af := rep.AppendFlood
	if af.Compactions.N == 0 || af.Appends.N == 0 || af.Stored == 0 || af.Refused["writes_per_second"]+af.Refused["concurrent_writes"] == 0 || af.Failed != 0 {
		t.Fatalf("A's append flood: %+v", af)
	}
	// What the floods sent a second is measured, and never over their
	// rates (a late tick sends what is due, no more); reaching them is
	// make chaos's goal (a loaded machine here).
	if rep.FloodRate <= 0 || rep.FloodRate > 1.1*40 || af.Rate <= 0 || af.Rate > 1.1*200 {
		t.Fatalf("A's floods sent %.1f requests and %.1f appends a second, of 40 and 200", rep.FloodRate, af.Rate)
	}
	// Two replicas share A's stored-usage quotas: A is refused, and gets
	// at most 10 % over them.
	q := rep.Quota
	if q.Refused["sessions"] == 0 || q.Refused["bytes_stored"] == 0 || q.SessionsOver > 0.10 || q.BytesOver > 0.10 || q.Sessions < int64(q.SessionsQuota)*9/10 {
		t.Fatalf("A over its quotas: %+v", q)
	}
}
