// Package embedded runs a nats-server with JetStream inside the process: the
// default server of a local `compactor serve` and of `compactor demo`.
package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// DefaultPort is the standard NATS client port.
const DefaultPort = 4222

// Options say where the server listens and stores.
type Options struct {
	// Host is the listen address (default 127.0.0.1: loopback only).
	Host string
	// Port is the client port (0: DefaultPort; -1: a free one).
	Port int
	// DataDir holds the JetStream file store; it is created if missing.
	DataDir string
	// Logger receives the server's warnings and errors (nil: discard).
	Logger *slog.Logger
	// ReadyTimeout bounds the wait for the server to accept clients
	// (default 10 s).
	ReadyTimeout time.Duration
	// SyncInterval is how often the server flushes its store to disk
	// (fsync): 0, the default, after every write, so that a write
	// acknowledged is on disk (one server has no replica to fall back
	// on); a duration trades the writes of that last interval, lost in a
	// power loss or kernel panic, for throughput (make scale measures it).
	SyncInterval time.Duration
	// ConfigFile, when set, is a nats-server configuration (accounts,
	// users, limits) the server starts from; Host, Port, DataDir and
	// SyncInterval replace its listen address, store and sync.
	ConfigFile string
}

// Start runs a JetStream server on o and waits until it accepts clients.
// The caller owns it: Shutdown stops it. It returns a clear error when the
// port is taken or the data dir cannot be used.
func Start(o Options) (*server.Server, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.DataDir == "" {
		return nil, errors.New("embedded nats-server: a data dir is required")
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("embedded nats-server: data dir: %w", err)
	}
	if o.Port > 0 { // a clear message beats the server's own fatal log
		l, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
		if err != nil {
			return nil, fmt.Errorf("embedded nats-server: %s:%d is taken (another server running? use --nats-port, or --nats-url to connect to it): %w", o.Host, o.Port, err)
		}
		l.Close()
	}
	opts := &server.Options{ServerName: "compactor-embedded", MaxPayload: 1 << 20}
	if o.ConfigFile != "" {
		if opts, err = server.ProcessConfigFile(o.ConfigFile); err != nil {
			return nil, fmt.Errorf("embedded nats-server: %w", err)
		}
	}
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoSigs = o.Host, o.Port, true, dir, true
	opts.SyncAlways, opts.SyncInterval = o.SyncInterval <= 0, max(o.SyncInterval, 0)
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	if o.Logger != nil {
		s.SetLoggerV2(logger{o.Logger}, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(o.ReadyTimeout) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("embedded nats-server: not ready within %v", o.ReadyTimeout)
	}
	if !s.JetStreamEnabled() {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, errors.New("embedded nats-server: JetStream did not start (is the data dir writable?)")
	}
	return s, nil
}

// ClusterSyncInterval is how often a cluster's nodes sync their stores
// (deploy/nats-cluster.conf's sync_interval): an acknowledged write is on
// a quorum of nodes at once, and on their disks within this.
const ClusterSyncInterval = time.Second

// Stop shuts s down and waits until it has.
func Stop(s *server.Server) {
	s.Shutdown()
	s.WaitForShutdown()
}

// logger passes the server's warnings and errors to slog; its notices,
// debug and trace lines are dropped (they are per-connection chatter).
type logger struct{ l *slog.Logger }

func (g logger) Noticef(string, ...any) {}
func (g logger) Debugf(string, ...any)  {}
func (g logger) Tracef(string, ...any)  {}
func (g logger) Warnf(format string, v ...any) {
	g.l.Warn(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
}
func (g logger) Errorf(format string, v ...any) {
	g.l.Error(fmt.Sprintf(format, v...), slog.String("component", "nats-server"))
}
func (g logger) Fatalf(format string, v ...any) {
	g.l.Error(fmt.Sprintf(format, v...), slog.String("component", "nats-server"), slog.Bool("fatal", true))
}
