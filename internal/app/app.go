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
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/inspect"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/metrics"
	"github.com/compactor/compactor/internal/migrate"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/quota"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/session"
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
	// start; Replicas, Shards, AckWait and MaxDeliver size them.
	Provision  bool
	Replicas   int
	Shards     int
	AckWait    time.Duration
	MaxDeliver int

	// Workers bounds the requests held at once (consumer) and the
	// synchronous compactions at once (endpoint).
	Workers int
	// PrepareWorkers run preparations at once (default 4; see
	// pipeline.Config.PrepareAt).
	PrepareWorkers int
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

	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Start builds the service and starts its parts. It returns once the
// service is provisioned and its endpoints are up (the consumer starts
// pulling at once); Wait returns when it has stopped: after ctx's end
// (a clean shutdown, nil), or after one part failed (its error).
func Start(ctx context.Context, cfg Config) (a *App, err error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Every line logged with a request's context names its tenant.
	log = slog.New(telemetry.LogHandler{Handler: tenant.LogHandler{Handler: log.Handler()}})
	if cfg.Summarizer == nil {
		return nil, errors.New("app: a summarizer is required")
	}
	if cfg.Models == nil {
		cfg.Models = models.Default()
	}
	if cfg.ConnName == "" {
		cfg.ConnName = "compactor"
	}
	if cfg.Workers <= 0 {
		cfg.Workers = consumer.DefaultWorkers
	}
	a = &App{log: log, done: make(chan struct{})}
	var cleanups []func()
	defer func() {
		if err != nil {
			for i := len(cleanups) - 1; i >= 0; i-- {
				cleanups[i]()
			}
		}
	}()

	a.URL = cfg.NATSURL
	if a.URL == "" {
		eo := cfg.Embedded
		if eo.Logger == nil {
			eo.Logger = log
		}
		if a.Server, err = embedded.Start(eo); err != nil {
			return nil, err
		}
		srv := a.Server
		cleanups = append(cleanups, func() { embedded.Stop(srv) })
		a.URL = srv.ClientURL()
		log.Info("embedded nats-server started", slog.String("url", a.URL), slog.String("data_dir", eo.DataDir))
	}
	closed := make(chan struct{})
	opts := []nats.Option{nats.Name(cfg.ConnName), nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", slog.String("error", err.Error()))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", slog.String("url", c.ConnectedUrlRedacted())) }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("nats", slog.String("subject", subj), slog.String("error", err.Error()))
		})}
	if cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(cfg.Creds))
	}
	opts = append(opts, cfg.NATSOptions...)
	if a.NC, err = nats.Connect(a.URL, opts...); err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", a.URL, err)
	}
	nc := a.NC
	cleanups = append(cleanups, func() { nc.Close() })
	if a.JS, err = jetstream.New(nc); err != nil {
		return nil, err
	}

	// Provisioning a cluster (R3, a bucket and a stream per shard) takes
	// tens of seconds on a loaded machine.
	setup, cancelSetup := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelSetup()
	if cfg.Provision {
		if err := ProvisionAll(setup, nc, a.JS, Provisioning{Replicas: cfg.Replicas, Shards: cfg.Shards, AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver}); err != nil {
			return nil, err
		}
	}
	store, err := kvstore.NewSessions(setup, nc, a.JS)
	if err != nil {
		return nil, BucketHint(err)
	}
	if err := migrateAtStart(ctx, nc, a.JS, store, cfg.Provision, log); err != nil {
		return nil, err
	}
	if cfg.SessionTTL > 0 {
		// The sweep reads when a session was last written from its
		// record, which appends write at least this often.
		store.SetCheckpointAge(min(time.Minute, cfg.SessionTTL/4))
	}
	breakers, err := kvstore.NewBreakers(setup, nc, a.JS)
	if err != nil {
		return nil, BucketHint(err)
	}
	a.Quotas = quota.New(store, consumer.Backlog(a.JS), quota.Options{Logger: log, RefreshEvery: cfg.UsageEvery})
	if a.Pipeline, err = pipeline.New(store, breakers, cfg.Summarizer, cfg.Pipeline, pipeline.WithModels(cfg.Models), pipeline.WithLogger(log),
		pipeline.WithModelBudget(a.Quotas)); err != nil {
		return nil, err
	}
	a.SetTenants(cfg.Tenants, cfg.Limits)
	a.Sessions = sessions.New(store, breakers, cfg.Models, sessions.WithQuotas(a.Quotas), sessions.WithImageEstimate(cfg.Pipeline.ImageTokens))
	a.Metrics = metrics.New(cfg.Version, func() consumer.Stats { return a.Consumer.Stats() })
	// Preparations yield to requests: none starts while the consumer's
	// workers are all taken.
	observePrep := a.Metrics.ObservePreparation
	if o := cfg.ObservePreparation; o != nil {
		observePrep = func(out pipeline.Preparation, err error) { a.Metrics.ObservePreparation(out, err); o(out, err) }
	}
	a.Preparer = preparer.New(a.Pipeline, preparer.Options{Workers: cfg.PrepareWorkers, Logger: log, Observe: observePrep,
		Busy: func() bool { return a.Consumer.InFlight() >= int64(cfg.Workers) }})
	a.Metrics.Preparations(a.Pipeline.PrepareStats, a.Preparer.Stats)
	if o, ok := cfg.Summarizer.(interface{ Observe(func(router.Call)) }); ok {
		o.Observe(a.Metrics.ObserveModelCall) // each provider call: its time, by provider, model and outcome
	}
	a.Metrics.TenantUsage(func() (time.Time, map[string]session.TenantUsage) { u := a.Quotas.Usage(); return u.At, u.Tenants })
	observe := func(res *pipeline.Result) {
		a.Metrics.Observe(res)
		if res.Outcome == pipeline.OutcomeCompacted {
			a.Preparer.Compacted(tenant.With(context.Background(), res.Tenant), res.SessionID)
		}
	}
	a.Consumer = consumer.New(nc, a.JS, a.Pipeline, consumer.Options{Workers: cfg.Workers, Source: cfg.Source, Logger: log,
		ShutdownGrace: cfg.ShutdownGrace, Observe: observe, RetryDelay: cfg.RetryDelay, NearBudget: a.Preparer.NearBudget})
	pub := &events.Publisher{JS: a.JS, Source: cfg.Source, Stream: consumer.ResultStream}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.cancel = cancel
	cleanups = append(cleanups, cancel)
	apiSrv, err := api.Start(runCtx, nc, api.Deps{Pipeline: a.Pipeline, Publisher: pub, Sessions: a.Sessions, Breakers: breakers,
		Logger: log, Version: cfg.Version, Workers: cfg.Workers, Observe: observe, ShutdownGrace: cfg.ShutdownGrace,
		Stats: a.stats, Appended: a.Preparer.Appended, Quotas: a.Quotas})
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { _ = apiSrv.Stop() })
	// Tenants' request events, stored under their tenant's subjects and
	// deduplication ids.
	ingest, err := consumer.StartIngest(nc, a.Quotas, log)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, ingest.Stop)
	// The endpoints' subscriptions reach the server before Start says the
	// service is up, so a request right after is not "no responders".
	if err := nc.FlushTimeout(10 * time.Second); err != nil {
		return nil, fmt.Errorf("subscribe the endpoints: %w", err)
	}

	var g run.Group
	// The caller's context: its end is a clean shutdown.
	g.Add(func() error {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
		}
		return nil
	}, func(error) { cancel() })
	// The consumer, which drains, releases and waits for its work itself.
	consCtx, stopCons := context.WithCancel(runCtx)
	g.Add(func() error {
		if err := a.Consumer.Run(consCtx); err != nil {
			return fmt.Errorf("consumer stopped: %w", err)
		}
		return nil
	}, func(error) { stopCons() })
	// The quotas' view of the store's usage, kept fresh.
	quotaCtx, stopQuota := context.WithCancel(runCtx)
	g.Add(func() error { a.Quotas.Run(quotaCtx); return nil }, func(error) { stopQuota() })
	// The preparer: its work is only ever a head start, cancelled at once.
	prepCtx, stopPrep := context.WithCancel(runCtx)
	g.Add(func() error { return a.Preparer.Run(prepCtx) }, func(error) { stopPrep() })
	// The micro endpoints: stopping them lets synchronous compactions
	// finish within the grace.
	apiStopped := make(chan struct{})
	g.Add(func() error { <-apiStopped; return nil }, func(error) {
		ingest.Stop()
		if err := apiSrv.Stop(); err != nil {
			log.Warn("stop micro service", slog.String("error", err.Error()))
		}
		close(apiStopped)
	})
	// The connection: closed under the service, nothing works any more.
	connDone := make(chan struct{})
	g.Add(func() error {
		select {
		case <-closed:
			return errors.New("the NATS connection closed")
		case <-connDone:
			return nil
		}
	}, func(error) { close(connDone) })
	if cfg.UI && cfg.MetricsAddr == "" {
		return nil, errors.New("app: the inspector page (--ui) is served on the metrics address: set --metrics-addr")
	}
	if cfg.MetricsAddr != "" {
		var ui http.Handler
		if cfg.UI {
			ui = a.inspector(cfg, breakers)
		}
		if a.MetricsAddr, err = serveHTTP(&g, "--metrics-addr", cfg.MetricsAddr, a.handler(ui)); err != nil {
			return nil, err
		}
		log.Info("metrics", slog.String("url", "http://"+a.MetricsAddr+"/metrics"))
		if cfg.UI {
			log.Info("inspector", slog.String("url", "http://"+a.MetricsAddr+inspect.Prefix), slog.Bool("sign_in", a.NC.AuthRequired()))
		}
	}
	if cfg.PprofAddr != "" {
		if a.PprofAddr, err = serveHTTP(&g, "--pprof-addr", cfg.PprofAddr, pprofHandler()); err != nil {
			return nil, err
		}
		log.Info("pprof", slog.String("url", "http://"+a.PprofAddr+"/debug/pprof/"))
	}
	if cfg.SessionTTL > 0 {
		sweepCtx, stopSweep := context.WithCancel(runCtx)
		every := cfg.SweepEvery
		if every <= 0 {
			every = min(max(cfg.SessionTTL/10, time.Second), 5*time.Minute)
		}
		g.Add(func() error { a.sweep(sweepCtx, cfg.SessionTTL, every); return nil }, func(error) { stopSweep() })
	}

	log.Info("serving", slog.String("nats_url", redact(a.URL)), slog.Int("workers", cfg.Workers),
		slog.String("consumer", consumer.RequestStream+"/"+consumer.Durable), slog.Duration("session_ttl", cfg.SessionTTL))
	go func() {
		defer close(a.done)
		a.err = g.Run()
		log.Info("shutting down")
		// Drain flushes the acks and results still buffered, then closes.
		if err := nc.Drain(); err == nil {
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				log.Warn("NATS drain did not finish in 10s")
			}
		}
		if a.Server != nil {
			embedded.Stop(a.Server)
		}
		if a.err == nil {
			log.Info("stopped")
		}
	}()
	return a, nil
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

// serveHTTP listens on addr (named by flag in errors) and serves h as a
// part of g, shut down with it; it returns the address it listens on.
func serveHTTP(g *run.Group, flag, addr string, h http.Handler) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	g.Add(func() error {
		if err := hs.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s server: %w", flag, err)
		}
		return nil
	}, func(error) {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = hs.Shutdown(sctx)
	})
	return l.Addr().String(), nil
}

// pprofHandler serves net/http/pprof under /debug/pprof/ (its own mux:
// the profiles are never on the metrics address).
func pprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// inspector is the inspector page over the service's stores: behind an
// operator's NATS credentials when the server requires authentication.
func (a *App) inspector(cfg Config, breakers *kvstore.Breakers) http.Handler {
	ic := inspect.Config{Sessions: a.Sessions, Breakers: breakers, Logger: a.log, Tenants: func() []string {
		return slices.Collect(maps.Keys(a.Quotas.Usage().Tenants))
	}}
	if a.NC.AuthRequired() {
		ic.Auth = &inspect.NATSAuth{URLs: a.URL, Options: cfg.SignInOptions, ListSubject: api.SubjectList,
			InfoSubject: "$JS.API.STREAM.INFO.KV_" + kvstore.BreakersBucket}
	} else {
		a.log.Warn("the inspector page asks for no credentials: the NATS server requires none (anyone who reaches the metrics address reads every session)")
	}
	return inspect.Handler(ic)
}

// handler serves /metrics, /livez, /healthz (200 while connected to
// NATS), /readyz (200 while it takes requests: connected, provisioned and
// consuming) and, when ui is set, the inspector page under /ui/.
func (a *App) handler(ui http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", a.Metrics.Handler())
	if ui != nil {
		mux.Handle(inspect.Prefix, ui)
	}
	// Liveness: the process runs and serves HTTP, whatever NATS does (a
	// probe on /healthz or /readyz would restart every replica in a NATS
	// outage, which a restart cannot fix).
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.NC.IsConnected() {
			http.Error(w, "not connected to NATS: "+a.NC.Status().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !a.NC.IsConnected():
			http.Error(w, "not connected to NATS: "+a.NC.Status().String(), http.StatusServiceUnavailable)
		case !a.Consumer.Consuming():
			http.Error(w, "not consuming "+consumer.RequestStream+" (starting, stopping, or the consumer cannot be pulled: see the log)", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ready")
		}
	})
	return mux
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
}

// ProvisionAll provisions the buckets, the streams and the consumer; on a
// cluster it then spreads the session shards' leaders over the nodes.
func ProvisionAll(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, p Provisioning) error {
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Replicas: p.Replicas, Shards: p.Shards}); err != nil {
		return permissionHint(err)
	}
	if err := consumer.Provision(ctx, js, consumer.Settings{Replicas: p.Replicas, AckWait: p.AckWait, MaxDeliver: p.MaxDeliver}); err != nil {
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
