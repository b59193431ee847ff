package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/natstest"
)

// TestMain lets the test binary run as the compactor command itself, so
// the process tests start, kill and restart a real `compactor serve`.
func TestMain(m *testing.M) {
	if os.Getenv("COMPACTOR_TEST_RUN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// process is `compactor serve` in a child process.
type process struct {
	cmd  *exec.Cmd
	logs *natstest.LogBuffer
	done chan struct{}
}

func startProcess(t *testing.T, url string, args ...string) *process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &process{logs: &natstest.LogBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(exe, append([]string{"serve", "--nats-url", url, "--metrics-addr", "", "--ack-wait", "2s"}, args...)...)
	p.cmd.Env = append(os.Environ(), "COMPACTOR_TEST_RUN_MAIN=1")
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	natstest.Eventually(t, 60*time.Second, 50*time.Millisecond, func() error {
		select {
		case <-p.done:
			t.Fatalf("compactor serve exited before serving:\n%s", p.logs.String())
		default:
		}
		if !strings.Contains(p.logs.String(), `msg=serving`) {
			return fmt.Errorf("compactor serve not serving:\n%s", p.logs.String())
		}
		_, err := nc.Request("$SRV.PING."+contract.ServiceName, nil, 200*time.Millisecond)
		return err
	})
	return p
}

// signal sends sig and waits for the exit; it returns the exit code.
func (p *process) signal(t *testing.T, sig os.Signal, within time.Duration) int {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("no exit within %v of %v:\n%s", within, sig, p.logs.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// publishRequest publishes a ContextOverBudget request with its id as
// Nats-Msg-Id.
func publishRequest(t *testing.T, js jetstream.JetStream, id, sid string) {
	t.Helper()
	ev, err := events.NewEvent(id, contract.TypeContextOverBudget, "urn:test-runtime", sid, time.Now(), contract.RequestData{SessionID: sid, Model: "gpt-4o"})
	if err != nil {
		t.Fatal(err)
	}
	h, body := events.EncodeBinary(ev)
	if _, err := js.PublishMsg(context.Background(), &nats.Msg{Subject: contract.Subject(contract.TypeContextOverBudget, sid), Header: h, Data: body}); err != nil {
		t.Fatal(err)
	}
}

// waitResults waits until the result stream holds n result events for
// request id, then checks no more come.
func waitResults(t *testing.T, js jetstream.JetStream, id string, n int, within time.Duration) []map[string]any {
	t.Helper()
	find := func() []map[string]any {
		var out []map[string]any
		types, data := streamData(t, js, consumer.ResultStream)
		for i := range types {
			if data[i]["request_id"] == id && (types[i] == contract.TypeCompactionCompleted || types[i] == contract.TypeCompactionFailed) {
				out = append(out, data[i])
			}
		}
		return out
	}
	natstest.Eventually(t, within, 50*time.Millisecond, func() error {
		if got := len(find()); got < n {
			return fmt.Errorf("%d result events for %s, want %d", got, id, n)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // a duplicate would show by now
	return find()
}

func pending(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	return natstest.StreamMsgs(t, js, consumer.RequestStream)
}

// stuck is a serve process whose one request is held in its model call.
type stuck struct {
	srv   *server.Server
	url   string
	js    jetstream.JetStream
	model *scriptedModel
	args  []string
	first *process
}

// startStuck starts serve in a process against a model that holds every
// call, imports the bundled run as sid and requests its compaction; it
// returns once the model call is in flight.
func startStuck(t *testing.T, sid, requestID string, extra ...string) *stuck {
	t.Helper()
	st := &stuck{srv: natstest.Server(t, t.TempDir(), -1)}
	st.url = st.srv.ClientURL()
	var base string
	st.model, base = newScriptedModel(t, "block")
	st.args = append([]string{"--provider", "openai", "--base-url", base, "--summary-model", "gpt-4o-mini"}, extra...)
	st.first = startProcess(t, st.url, st.args...)
	if cli(t, st.url, nil, "session", "import", fixture, "--session-id", sid, "--context-limit", "6000") != 0 {
		t.Fatal("import failed")
	}
	_, st.js = natstest.Connect(t, st.srv)
	publishRequest(t, st.js, requestID, sid)
	select {
	case <-st.model.entered:
	case <-time.After(30 * time.Second):
		t.Fatalf("the model was never called:\n%s", st.first.logs.String())
	}
	return st
}

// TestProcessKilledMidCompaction: `compactor serve` is killed with SIGKILL
// while its model call is in flight; a new process picks the request up
// after the ack wait and it completes exactly once: one result event, one
// compaction message, nothing left pending.
func TestProcessKilledMidCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	st := startStuck(t, "k1", "req-kill")
	st.first.signal(t, syscall.SIGKILL, 10*time.Second)
	if got := waitResults(t, st.js, "req-kill", 0, 0); len(got) != 0 {
		t.Fatalf("a result before the restart: %v", got)
	}

	st.model.mode.Store("ok")
	second := startProcess(t, st.url, st.args...)
	got := waitResults(t, st.js, "req-kill", 1, 60*time.Second)
	if len(got) != 1 || got[0]["outcome"] != "compacted" {
		t.Fatalf("results %v\n%s", got, second.logs.String())
	}
	_, comps, err := kvSessions(t, st.srv).History(context.Background(), "k1")
	if err != nil || len(comps) != 1 {
		t.Fatalf("%d compaction messages (%v), want 1", len(comps), err)
	}
	if n := pending(t, st.js); n != 0 {
		t.Fatalf("%d requests still pending", n)
	}
	if code := second.signal(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, second.logs.String())
	}
}

// TestProcessSIGTERMReleasesWork: SIGTERM while a compaction is stuck in its
// model call: past the shutdown grace the process releases the request and
// exits 0; the request is still pending, and the next process completes it
// once.
func TestProcessSIGTERMReleasesWork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	st := startStuck(t, "g1", "req-term", "--shutdown-grace", "1s")
	if code := st.first.signal(t, syscall.SIGTERM, 20*time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, st.first.logs.String())
	}
	if !strings.Contains(st.first.logs.String(), "released at shutdown") {
		t.Fatalf("the running request was not released:\n%s", st.first.logs.String())
	}
	if n := pending(t, st.js); n != 1 {
		t.Fatalf("%d requests pending after the release, want 1", n)
	}
	st.model.mode.Store("ok")
	startProcess(t, st.url, st.args...)
	got := waitResults(t, st.js, "req-term", 1, 30*time.Second)
	if len(got) != 1 || got[0]["outcome"] != "compacted" {
		t.Fatalf("results %v", got)
	}
}

// serve reads the config file's tenants' policies again on SIGHUP; a file
// that no longer loads changes nothing and says why.
func TestServeReloadsTenantPoliciesOnSIGHUP(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	cfg := filepath.Join(t.TempDir(), "compactor.json")
	if err := os.WriteFile(cfg, []byte(`{"tenants": {"TENANT_A": {"summary_model": "gpt-4o-mini"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, srv.ClientURL(), "--config", cfg)
	if err := os.WriteFile(cfg, []byte(`{"tenants": {"TENANT_A": {"summary_model": "gpt-4o-mini"}, "TENANT_B": {"summary_model": "gpt-4.1-mini"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(p.logs.String(), `msg="tenants' policies reloaded"`) || !strings.Contains(p.logs.String(), "tenants=2") {
			return fmt.Errorf("no reload logged:\n%s", p.logs.String())
		}
		return nil
	})
	if err := os.WriteFile(cfg, []byte(`{"tenants": {"tenant.b": {}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if !strings.Contains(p.logs.String(), "the tenants' policies are unchanged") {
			return fmt.Errorf("a bad file's reload not refused:\n%s", p.logs.String())
		}
		return nil
	})
	select {
	case <-p.done:
		t.Fatalf("serve exited on SIGHUP:\n%s", p.logs.String())
	default:
	}
}
