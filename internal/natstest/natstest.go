// Package natstest runs an embedded nats-server with JetStream for tests:
// in process, on a free loopback port, its store in the test's temp dir,
// shut down by t.Cleanup.
package natstest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/embedded"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Start returns a running server and a connection with a JetStream context.
func Start(t testing.TB) (*server.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := Server(t, t.TempDir(), -1)
	nc, js := Connect(t, s)
	return s, nc, js
}

// Server starts a server storing under dir, on port (-1: a free one). It
// is shut down at the test's end if still running; Shutdown it earlier to
// restart on the same dir.
func Server(t testing.TB, dir string, port int) *server.Server {
	t.Helper()
	return ServerWith(t, &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir})
}

// ServerWith starts an in-process nats-server with opts (quiet, no signal
// handlers), waits until it accepts clients, and shuts it down at the
// test's end if still running.
func ServerWith(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("natstest: nats-server not ready in 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// StreamMsgs is how many messages a stream holds now.
func StreamMsgs(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// Connect opens a connection to s, closed at the test's end.
func Connect(t testing.TB, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectURL(t, s.ClientURL())
}

// Cluster starts a three-node JetStream cluster in process, shut down at
// the test's end.
func Cluster(t testing.TB) *embedded.Cluster {
	t.Helper()
	c, err := embedded.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// ConnectURL opens a connection to url (a cluster's URLs: it reconnects
// to another node when one dies), closed at the test's end.
func ConnectURL(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Eventually calls f every step until it returns nil, and fails the test
// with f's last error when total has passed (the one poll helper of the
// tests, as nats.go's checkFor).
func Eventually(t testing.TB, total, step time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", total, err)
		}
		time.Sleep(step)
	}
}

// LogBuffer is a log a service writes from many goroutines while the test
// reads it.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
