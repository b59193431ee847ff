// Package app wires the service — the NATS connection (to an embedded
// server or an existing one), provisioning, the stores, the pipeline, the
// durable consumer, the micro endpoints, /metrics and the idle-session
// sweeper — and runs its parts as one group: the first to stop (an error,
// or the end of the context) stops the others (github.com/oklog/run); then
// the connection drains and the embedded server stops. serve, demo and
// bench build the service through it, so they run what a user deploys.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/metrics"
	"github.com/compactor/compactor/internal/migrate"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/quota"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
)

// Config is everything the service is built from.
type Config struct {
	// NATSURL is the server to connect to; empty runs an embedded one
	// with Embedded.
	NATSURL string
	// Creds is a credentials file (JWT and nkey seed).
	Creds string
	// NATSOptions are more connection options: TLS, credentials.
	NATSOptions []nats.Option
	Embedded    embedded.Options
	// ConnName names the connection (default "compactor").
	ConnName string

	// Provision creates or updates the streams, buckets and consumer at
	// start; Replicas, Shards, AckWait, MaxDeliver and EventBytes size
	// them (consumer.Settings).
	Provision  bool
	Replicas   int
	Shards     int
	AckWait    time.Duration
	MaxDeliver int
	EventBytes int64

	// Workers bounds the requests held at once (consumer) and the
	// synchronous compactions at once (endpoint).
	Workers int
	// PrepareWorkers run preparations at once (default 4; see
	// pipeline.Config.PrepareAt).
	PrepareWorkers int
	// RecallMemory bounds the search indexes this replica keeps, in bytes
	// (0: sessions.DefaultRecallMemory).
	RecallMemory int
	// ObservePreparation, when set, sees every preparation that ran
	// (after the metrics).
	ObservePreparation func(pipeline.Preparation, error)
	ShutdownGrace      time.Duration
	// Source is the CloudEvents source of the events published.
	Source string
	// MetricsAddr serves /metrics, /healthz and /readyz ("": off).
	MetricsAddr string
	// UI serves the inspector page at /ui/ on MetricsAddr (read-only).
	// Where the NATS server requires authentication it asks for an
	// operator's NATS user and password and has the server check them,
	// connecting with SignInOptions (TLS) besides.
	UI            bool
	SignInOptions []nats.Option
	// PprofAddr serves net/http/pprof at /debug/pprof/ ("": off, the
	// default: profiles show the process's internals).
	PprofAddr string
	// SessionTTL deletes sessions nobody wrote to for that long (0: keep
	// them), checked every SweepEvery (default a tenth of it, within
	// 1 s..5 min).
	SessionTTL time.Duration
	SweepEvery time.Duration
	// Version is the service's SemVer version (micro).
	Version string

	Pipeline   pipeline.Config
	Models     *models.Table
	Summarizer pipeline.Summarizer
	Logger     *slog.Logger
	// Tenants are the tenants' policies, Limits their quotas (SetTenants
	// replaces both while the service runs).
	Tenants map[string]pipeline.TenantPolicy
	Limits  map[string]tenant.Limits
	// UsageEvery is how often the store's per-tenant usage is read for the
	// quotas of what is stored (default 10 s; thirty times that for the
	// metrics alone).
	UsageEvery time.Duration
	// RetryDelay overrides the consumer's redelivery delays (tests).
	RetryDelay func(delivered uint64) time.Duration
	// StartTimeout bounds the wait for NATS and JetStream at start
	// (default DefaultStartTimeout): a server not listening yet, a stream
	// with no leader yet. Each JetStream request times out on its own and
	// is asked again until then.
	StartTimeout time.Duration
}

// DefaultStartTimeout is how long a starting service waits for NATS and
// JetStream by default.
const DefaultStartTimeout = 5 * time.Minute

// Validate says what in c can never start, before anything is connected.
func (c Config) Validate() error {
	switch {
	case c.Summarizer == nil:
		return errors.New("app: a summarizer is required")
	case c.UI && c.MetricsAddr == "":
		return errors.New("app: the inspector page (--ui) is served on the metrics address: set --metrics-addr")
	case c.Workers < 0, c.PrepareWorkers < 0, c.Replicas < 0, c.Shards < 0, c.MaxDeliver < 0:
		return errors.New("app: workers, prepare workers, replicas, shards and max deliver must not be negative")
	case c.AckWait < 0, c.SessionTTL < 0, c.StartTimeout < 0, c.ShutdownGrace < 0:
		return errors.New("app: ack wait, session TTL, start timeout and shutdown grace must not be negative")
	}
	return nil
}

func (c *Config) defaults() {
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Every line logged with a request's context names its tenant.
	c.Logger = slog.New(telemetry.LogHandler{Handler: tenant.LogHandler{Handler: log.Handler()}})
	if c.Models == nil {
		c.Models = models.Default()
	}
	if c.ConnName == "" {
		c.ConnName = "compactor"
	}
	if c.Workers <= 0 {
		c.Workers = consumer.DefaultWorkers
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
}

// App is a started service.
type App struct {
	// URL is the NATS server the service uses.
	URL string
	// NC and JS are the service's connection.
	NC       *nats.Conn
	JS       jetstream.JetStream
	Server   *server.Server // the embedded server, if any
	Sessions *sessions.Service
	Pipeline *pipeline.Service
	Consumer *consumer.Consumer
	Preparer *preparer.Preparer
	Metrics  *metrics.Metrics
	// Quotas answers the tenants' quotas.
	Quotas *quota.Quotas
	// MetricsAddr is where /metrics listens ("" when off), PprofAddr
	// where /debug/pprof/ does.
	MetricsAddr, PprofAddr string

	cfg      Config
	log      *slog.Logger
	store    *kvstore.Sessions
	breakers *kvstore.Breakers
	api      *api.Server
	ingest   *consumer.Ingest
	observe  func(*pipeline.Result)
	// starting says what the service waits for before it serves ("" once
	// it does): /readyz answers it.
	starting atomic.Pointer[string]
	// ui is the inspector page, mounted once the stores are bound.
	ui atomic.Pointer[http.Handler]
	// nc is NC for the probes, which answer before it is set.
	nc atomic.Pointer[nats.Conn]
	// denied is the last permission violation the server reported.
	denied atomic.Pointer[error]
	runCtx context.Context
	// servers are the HTTP servers, listening from the start.
	servers  []*httpServer
	closed   chan struct{} // the NATS connection closed
	cleanups []func()
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
}

// Start builds the service and starts its parts. /livez answers from the
// first step; setting up waits for NATS and JetStream (a cluster electing
// its leaders after a restart) within cfg.StartTimeout, asking again each
// request that goes unanswered. It returns once the service is provisioned
// and its endpoints are up (the consumer starts pulling at once); Wait
// returns when it has stopped: after ctx's end (a clean shutdown, nil), or
// after one part failed (its error).
func Start(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	a := &App{cfg: cfg, log: cfg.Logger, done: make(chan struct{}), closed: make(chan struct{})}
	a.setStarting("starting")
	a.Metrics = metrics.New(cfg.Version, a.consumerStats)
	deadline := time.Now().Add(cfg.StartTimeout)
	for _, step := range []func(context.Context, time.Time) error{a.listen, a.connect, a.setUpStore, a.build, a.startEndpoints} {
		if err := step(ctx, deadline); err != nil {
			a.undo()
			return nil, err
		}
	}
	a.run(ctx)
	return a, nil
}

// undo stops what the steps started, last first.
func (a *App) undo() {
	for i := len(a.cleanups) - 1; i >= 0; i-- {
		a.cleanups[i]()
	}
}

func (a *App) setStarting(what string) { a.starting.Store(&what) }

func (a *App) consumerStats() consumer.Stats {
	if a.Consumer == nil {
		return consumer.Stats{}
	}
	return a.Consumer.Stats()
}

// Stats is what the service's micro stats carry: the consumer's counters,
// with the preparations' beside them.
type Stats struct {
	consumer.Stats
	Preparations pipeline.PrepareStats `json:"preparations"`
	Preparer     preparer.Stats        `json:"preparer"`
}

func (a *App) stats() any {
	return Stats{Stats: a.Consumer.Stats(), Preparations: a.Pipeline.PrepareStats(), Preparer: a.Preparer.Stats()}
}

// Run starts the service and serves until ctx ends (nil) or a part fails.
func Run(ctx context.Context, cfg Config) error {
	a, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	return a.Wait()
}

// Wait returns when the service has stopped, with the error that stopped
// it (nil for a clean shutdown).
func (a *App) Wait() error {
	<-a.done
	return a.err
}

// SetTenants replaces the tenants' policies and quotas, for the requests
// that start from now on.
func (a *App) SetTenants(policies map[string]pipeline.TenantPolicy, limits map[string]tenant.Limits) {
	a.Pipeline.SetTenantPolicies(policies)
	a.Quotas.Set(limits)
}

// Stop shuts the service down cleanly and waits for it.
func (a *App) Stop() error {
	a.cancel()
	return a.Wait()
}

// sweep deletes idle sessions every period (jittered, so replicas spread
// out; each delete is a compare-and-set, so replicas sweeping at once are
// harmless).
func (a *App) sweep(ctx context.Context, ttl, every time.Duration) {
	for {
		t := time.NewTimer(time.Duration(float64(every) * (0.75 + rand.Float64()/2)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		n, err := a.Sessions.Sweep(ctx, ttl)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("session sweep", slog.String("error", err.Error()))
		}
		if n > 0 {
			a.log.Info("idle sessions deleted", slog.Int("sessions", n), slog.Duration("session_ttl", ttl))
		}
	}
}

// migrateAtStart moves the sessions of the store's first layout, if any,
// into the sharded one before the service serves (when it provisions;
// otherwise it refuses to start, naming the command that migrates).
func migrateAtStart(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, store *kvstore.Sessions, provision bool, log *slog.Logger) error {
	pending, err := migrate.Pending(ctx, js)
	if err != nil || !pending {
		return err
	}
	if !provision {
		return errors.New("the store holds sessions in the first layout (bucket sessions): migrate them with `compactor migrate` (as admin), or serve with --provision")
	}
	log.Info("migrating sessions of the first layout (bucket sessions) into the sharded store")
	r, err := migrate.Run(ctx, nc, js, store, nil)
	if err != nil {
		return err
	}
	log.Info("migrated", slog.Int("sessions", r.Sessions), slog.Int("messages", r.Messages), slog.Int("compactions", r.Compactions),
		slog.Int("already", r.Already), slog.Bool("old_bucket_deleted", r.BucketDeleted))
	return nil
}

// Provisioning sizes what ProvisionAll creates.
type Provisioning struct {
	// Replicas of every stream and bucket; Shards of the session store
	// (0: as many as Replicas; a store keeps the count it was made with).
	Replicas, Shards int
	AckWait          time.Duration
	MaxDeliver       int
	// EventBytes bounds the request, result and dead-letter streams
	// (consumer.Settings.EventBytes).
	EventBytes int64
}

// ProvisionAll provisions the buckets, the streams and the consumer; on a
// cluster it then spreads the session shards' leaders over the nodes.
func ProvisionAll(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, p Provisioning) error {
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Replicas: p.Replicas, Shards: p.Shards}); err != nil {
		return permissionHint(err)
	}
	if err := consumer.Provision(ctx, js, consumer.Settings{Replicas: p.Replicas, AckWait: p.AckWait, MaxDeliver: p.MaxDeliver, EventBytes: p.EventBytes}); err != nil {
		return permissionHint(err)
	}
	if p.Replicas > 1 {
		if _, err := kvstore.BalanceLeaders(ctx, nc, js); err != nil {
			return err
		}
	}
	return nil
}

func permissionHint(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("%w (a NATS user without the right to create streams sees a timeout: provision as an admin with `compactor provision`, then serve with --provision=false)", err)
	}
	return err
}

// BucketHint says what to do about a bucket that is not there.
func BucketHint(err error) error {
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w (run `compactor serve` or `compactor provision` against this server first)", err)
	}
	return err
}

// redact hides a password in a URL for logs.
func redact(url string) string {
	if at := strings.LastIndex(url, "@"); at > 0 {
		if i := strings.Index(url, "://"); i >= 0 && i < at {
			return url[:i+3] + "***" + url[at:]
		}
	}
	return url
}
