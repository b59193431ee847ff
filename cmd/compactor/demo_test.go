package main

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/sessions"
)

func TestDemo(t *testing.T) {
	code, out, stderr := runCLI(t, "demo")
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	for _, want := range []string{"tau-bench", "→ compacted", "Before: the whole conversation is 62 messages", "The context now:", "## Goal"} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
	// A clearing says what it cleared, not "0 messages summarised"; a
	// result answered from a preparation says so.
	for _, want := range []string{"tool result(s) cleared", "messages summarised (summary"} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " 0 messages summarised") {
		t.Fatalf("the demo reports a clearing as 0 messages summarised:\n%s", out)
	}
	if strings.Contains(out, "CompactionFailed") {
		t.Fatalf("a compaction failed in the demo:\n%s", out)
	}
	// Its store is gone with it: the closing hint says how to keep one
	// (it named a session on a server already gone).
	if !strings.Contains(out, "gone with it") || !strings.Contains(out, "--data-dir DIR") {
		t.Fatalf("the demo's closing hint:\n%s", out)
	}
}

// TestServeEmbeddedRestart: serve with its embedded server on a data dir;
// what it stored is there after a restart on the same dir.
func TestServeEmbeddedRestart(t *testing.T) {
	dir := t.TempDir()
	port := strconv.Itoa(freePort(t))
	url := "nats://127.0.0.1:" + port
	first := startEmbedded(t, url, "--data-dir", dir, "--nats-port", port)
	if cli(t, url, nil, "session", "import", fixture, "--session-id", "e1", "--context-limit", "6000") != 0 {
		t.Fatal("import failed")
	}
	var res map[string]any
	if cli(t, url, &res, "compact", "e1") != 0 || res["outcome"] != "compacted" {
		t.Fatalf("compact: %v", res)
	}
	// A second serve on the same port fails with a clear message.
	if code, _, stderr := runCLI(t, "serve", "--data-dir", t.TempDir(), "--nats-port", port, "--metrics-addr", ""); code != 1 || !strings.Contains(stderr, "is taken") {
		t.Fatalf("second serve on a taken port: exit %d: %s", code, stderr)
	}
	first.stop(t)

	startEmbedded(t, url, "--data-dir", dir, "--nats-port", port)
	var hist sessions.History
	if cli(t, url, &hist, "session", "show", "e1") != 0 || len(hist.Messages) != 62 || len(hist.Compactions) != 1 {
		t.Fatalf("after the restart: %d messages, %d compactions", len(hist.Messages), len(hist.Compactions))
	}
}

// startEmbedded runs serve with its own embedded server; url is where
// that server will listen.
func startEmbedded(t *testing.T, url string, args ...string) *served {
	t.Helper()
	// startServe passes --nats-url; an empty one selects the embedded server.
	s := startServeAt(t, url, append([]string{"--nats-url", ""}, args...)...)
	return s
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Issue 42: demo with NATS_URL set started its own service against that
// server, joined the real service's consumer and endpoints, and answered
// real sessions' requests. A demo never serves another server: it runs
// its own, and the server named is left untouched.
func TestDemoNeverServesAnotherServer(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	t.Setenv("NATS_URL", srv.ClientURL())
	code, out, stderr := runCLI(t, "demo")
	if code != 0 || !strings.Contains(out, "→ compacted") {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	if !strings.Contains(stderr, "is not used") {
		t.Fatalf("the demo does not say it ignores NATS_URL: %s", stderr)
	}
	_, js := natstest.Connect(t, srv)
	if names := js.StreamNames(context.Background()); names.Err() != nil {
		t.Fatal(names.Err())
	} else {
		for name := range names.Name() {
			t.Fatalf("the demo made stream %s on the server NATS_URL names", name)
		}
	}
}
