package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/run"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/inspect"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/quota"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
)

// The steps of Start, in order. Each adds to a.cleanups what undoes it.

// listen serves /livez, /healthz, /readyz and /metrics (and pprof when
// asked) from the first step, so a probe sees the process alive while it
// waits for NATS.
func (a *App) listen(context.Context, time.Time) error {
	for _, l := range []struct {
		flag, addr string
		h          func() http.Handler
		out        *string
	}{
		{"--metrics-addr", a.cfg.MetricsAddr, a.handler, &a.MetricsAddr},
		{"--pprof-addr", a.cfg.PprofAddr, pprofHandler, &a.PprofAddr},
	} {
		if l.addr == "" {
			continue
		}
		s, addr, err := listenHTTP(l.flag, l.addr, l.h())
		if err != nil {
			return err
		}
		a.servers = append(a.servers, s)
		a.cleanups = append(a.cleanups, s.shutdown)
		*l.out = addr
	}
	if a.MetricsAddr != "" {
		a.log.Info("metrics", slog.String("url", "http://"+a.MetricsAddr+"/metrics"))
	}
	if a.PprofAddr != "" {
		a.log.Info("pprof", slog.String("url", "http://"+a.PprofAddr+"/debug/pprof/"))
	}
	return nil
}

// connect starts the embedded server (no NATSURL) or connects to
// NATSURL, trying again while no server answers (one starting after
// this process) until the deadline.
func (a *App) connect(ctx context.Context, deadline time.Time) error {
	a.URL = a.cfg.NATSURL
	if a.URL == "" {
		eo := a.cfg.Embedded
		if eo.Logger == nil {
			eo.Logger = a.log
		}
		srv, err := embedded.Start(eo)
		if err != nil {
			return err
		}
		a.Server = srv
		a.cleanups = append(a.cleanups, func() { embedded.Stop(srv) })
		a.URL = srv.ClientURL()
		a.log.Info("embedded nats-server started", slog.String("url", a.URL), slog.String("data_dir", eo.DataDir))
	}
	opts := a.natsOptions()
	err := a.untilUp(ctx, deadline, "connect to NATS at "+redact(a.URL), unreachable, func(context.Context) error {
		nc, err := nats.Connect(a.URL, opts...)
		if err == nil {
			a.NC = nc
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", redact(a.URL), err)
	}
	nc := a.NC
	a.cleanups = append(a.cleanups, func() { nc.Close() })
	a.nc.Store(nc)
	a.JS, err = jetstream.New(nc)
	return err
}

// unreachable reports whether a connection failed because no server
// answered (not yet started, restarting), which passes by itself; a
// refused authorization or TLS handshake does not.
func unreachable(err error) bool {
	var ne net.Error
	return errors.Is(err, nats.ErrNoServers) || errors.Is(err, nats.ErrTimeout) || errors.As(err, &ne)
}

func (a *App) natsOptions() []nats.Option {
	log := a.log
	opts := []nats.Option{nats.Name(a.cfg.ConnName), nats.Timeout(5 * time.Second),
		nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", slog.String("error", err.Error()))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", slog.String("url", c.ConnectedUrlRedacted())) }),
		// Only a connection that was made closes.
		nats.ClosedHandler(func(*nats.Conn) { close(a.closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				a.denied.Store(&err)
			}
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Warn("nats", slog.String("subject", subj), slog.String("error", err.Error()))
		})}
	if a.cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(a.cfg.Creds))
	}
	return append(opts, a.cfg.NATSOptions...)
}

// setUpStore provisions (when asked), binds the session store and the
// breakers and migrates the first layout's sessions, each step asked again
// while JetStream is not available yet (a cluster electing its leaders:
// a request to a stream with no leader is never answered). Each JetStream
// request times out on its own (nats.go's 5 s for a context without a
// deadline), never on the whole start's budget.
func (a *App) setUpStore(ctx context.Context, deadline time.Time) error {
	ctx, stop := withoutDeadline(ctx)
	defer stop()
	cfg := a.cfg
	if cfg.Provision {
		p := Provisioning{Replicas: cfg.Replicas, Shards: cfg.Shards, AckWait: cfg.AckWait, MaxDeliver: cfg.MaxDeliver, EventBytes: cfg.EventBytes}
		if err := a.untilUp(ctx, deadline, "provision the streams and buckets", kvstore.Transient, func(ctx context.Context) error {
			return ProvisionAll(ctx, a.NC, a.JS, p)
		}); err != nil {
			return err
		}
	}
	if err := a.untilUp(ctx, deadline, "bind the session store", kvstore.Transient, func(ctx context.Context) (err error) {
		a.store, err = kvstore.NewSessions(ctx, a.NC, a.JS)
		return BucketHint(err)
	}); err != nil {
		return err
	}
	if err := a.untilUp(ctx, deadline, "migrate the first layout's sessions", kvstore.Transient, func(ctx context.Context) error {
		return migrateAtStart(ctx, a.NC, a.JS, a.store, cfg.Provision, a.log)
	}); err != nil {
		return err
	}
	if cfg.SessionTTL > 0 {
		// The sweep reads when a session was last written from its
		// record, which appends write at least this often.
		a.store.SetCheckpointAge(min(time.Minute, cfg.SessionTTL/4))
	}
	return a.untilUp(ctx, deadline, "bind the breakers", kvstore.Transient, func(ctx context.Context) (err error) {
		a.breakers, err = kvstore.NewBreakers(ctx, a.NC, a.JS)
		return BucketHint(err)
	})
}

// withoutDeadline is ctx without its deadline, still cancelled with it.
func withoutDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	return c, func() { stop(); cancel() }
}

// untilUp runs step until it succeeds, fails for a reason that does not
// pass by itself (!transient), ctx ends or the deadline comes; /readyz
// says what it waits for meanwhile. A permission violation the server
// reported fails it at once (a request the server refuses to route looks
// like one unanswered).
func (a *App) untilUp(ctx context.Context, deadline time.Time, what string, transient func(error) bool, step func(context.Context) error) error {
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if attempt == 1 {
			a.setStarting(what)
		}
		err := step(ctx)
		switch {
		case err == nil:
			return nil
		case a.denied.Load() != nil:
			return fmt.Errorf("%s: %w (the NATS user may not do this: provision as an admin with `compactor provision`, then serve with --provision=false)", what, *a.denied.Load())
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case !transient(err):
			return err
		case time.Now().Add(delay).After(deadline):
			return fmt.Errorf("%s: not available within the start timeout (%v): %w", what, a.cfg.StartTimeout, err)
		}
		a.setStarting(fmt.Sprintf("%s: waiting (attempt %d: %v)", what, attempt, err))
		a.log.Warn("waiting to start", slog.String("step", what), slog.Int("attempt", attempt), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// build makes the service's parts over the bound stores: quotas,
// pipeline, session use cases, preparer, consumer, and the inspector page.
func (a *App) build(context.Context, time.Time) (err error) {
	cfg := a.cfg
	a.Quotas = quota.New(a.store, consumer.Backlog(a.JS), quota.Options{Logger: a.log, RefreshEvery: cfg.UsageEvery})
	if a.Pipeline, err = pipeline.New(a.store, a.breakers, cfg.Summarizer, cfg.Pipeline, pipeline.WithModels(cfg.Models), pipeline.WithLogger(a.log),
		pipeline.WithModelBudget(a.Quotas)); err != nil {
		return err
	}
	a.SetTenants(cfg.Tenants, cfg.Limits)
	a.buildPreparer()
	// The preparer hears of every write of the use case, whichever driver
	// made it.
	a.Sessions = sessions.New(a.store, a.breakers, cfg.Models, sessions.WithQuotas(a.Quotas), sessions.WithImageEstimate(cfg.Pipeline.ImageTokens),
		sessions.WithRecallMemory(cmp.Or(cfg.RecallMemory, sessions.DefaultRecallMemory)),
		sessions.WithHooks(sessions.Hooks{
			Created: func(ctx context.Context, c sessions.Created) {
				a.Preparer.Created(ctx, c.SessionID, c.HeadSeq, c.Tokens, c.ContextLimit)
			},
			Appended: func(ctx context.Context, ap sessions.Appended) {
				a.Preparer.Appended(ctx, ap.SessionID, preparer.Append{Head: ap.HeadSeq, FirstSeq: ap.FirstSeq, Tokens: preparer.EstimateTokens(ap.Bytes), SessionBytes: ap.SessionBytes})
			},
		}))
	if o, ok := cfg.Summarizer.(interface{ Observe(func(router.Call)) }); ok {
		o.Observe(a.Metrics.ObserveModelCall) // each provider call: its time, by provider, model and outcome
	}
	a.Metrics.TenantUsage(func() (time.Time, map[string]session.TenantUsage) { u := a.Quotas.Usage(); return u.At, u.Tenants })
	a.Metrics.StoreFull(func() bool { _, full := a.store.Full(); return full })
	a.observe = func(res *pipeline.Result) {
		a.Metrics.Observe(res)
		if res.Outcome == pipeline.OutcomeCompacted {
			a.Preparer.Compacted(tenant.With(context.Background(), res.Tenant), res.SessionID)
		}
	}
	a.Consumer = consumer.New(a.NC, a.JS, a.Pipeline, consumer.Options{Workers: cfg.Workers, Source: cfg.Source, Logger: a.log,
		ShutdownGrace: cfg.ShutdownGrace, Observe: a.observe, RetryDelay: cfg.RetryDelay, NearBudget: a.Preparer.NearBudget})
	if cfg.UI {
		ui := a.inspector(a.breakers)
		a.ui.Store(&ui)
		a.log.Info("inspector", slog.String("url", "http://"+a.MetricsAddr+inspect.Prefix), slog.Bool("sign_in", a.NC.AuthRequired()))
	}
	return nil
}

// buildPreparer makes the preparer: preparations yield to requests (none
// starts while the consumer's workers are all taken).
func (a *App) buildPreparer() {
	observe := a.Metrics.ObservePreparation
	if o := a.cfg.ObservePreparation; o != nil {
		observe = func(out pipeline.Preparation, err error) { a.Metrics.ObservePreparation(out, err); o(out, err) }
	}
	workers := int64(a.cfg.Workers)
	a.Preparer = preparer.New(a.Pipeline, preparer.Options{Workers: a.cfg.PrepareWorkers, Logger: a.log, Observe: observe,
		Busy: func() bool { return a.Consumer.InFlight() >= workers }})
	a.Metrics.Preparations(a.Pipeline.PrepareStats, a.Preparer.Stats)
}

// startEndpoints starts the micro endpoints and the tenants' request
// ingest, and flushes their subscriptions to the server, so a request
// right after Start is not "no responders".
func (a *App) startEndpoints(ctx context.Context, _ time.Time) (err error) {
	cfg := a.cfg
	// The parts run until Stop or ctx's end (watched by run), not
	// cancelled by it directly: each stops in its own way.
	a.runCtx, a.cancel = context.WithCancel(context.WithoutCancel(ctx))
	a.cleanups = append(a.cleanups, a.cancel)
	pub := &events.Publisher{JS: a.JS, Source: cfg.Source, Stream: consumer.ResultStream}
	if a.api, err = api.Start(a.runCtx, a.NC, api.Deps{Pipeline: a.Pipeline, Publisher: pub, Sessions: a.Sessions, Breakers: a.breakers,
		Logger: a.log, Version: cfg.Version, Workers: cfg.Workers, Observe: a.observe, ShutdownGrace: cfg.ShutdownGrace,
		Stats: a.stats, Quotas: a.Quotas, ObserveEndpoint: a.Metrics.ObserveEndpoint}); err != nil {
		return err
	}
	srv := a.api
	a.cleanups = append(a.cleanups, func() { _ = srv.Stop() })
	// Tenants' request events, stored under their tenant's subjects and
	// deduplication ids.
	if a.ingest, err = consumer.StartIngest(a.NC, a.Quotas, a.log); err != nil {
		return err
	}
	a.cleanups = append(a.cleanups, a.ingest.Stop)
	if err := a.NC.FlushTimeout(10 * time.Second); err != nil {
		return fmt.Errorf("subscribe the endpoints: %w", err)
	}
	return nil
}

// run runs the parts as one group (the first to stop stops the others),
// then drains the connection and stops the embedded server.
func (a *App) run(ctx context.Context) {
	var g run.Group
	runCtx := a.runCtx
	// The caller's context: its end is a clean shutdown.
	g.Add(func() error {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
		}
		return nil
	}, func(error) { a.cancel() })
	a.addWorkers(&g, runCtx)
	// The micro endpoints: stopping them lets synchronous compactions
	// finish within the grace.
	apiStopped := make(chan struct{})
	g.Add(func() error { <-apiStopped; return nil }, func(error) {
		a.ingest.Stop()
		if err := a.api.Stop(); err != nil {
			a.log.Warn("stop micro service", slog.String("error", err.Error()))
		}
		close(apiStopped)
	})
	// The connection: closed under the service, nothing works any more.
	connDone := make(chan struct{})
	g.Add(func() error {
		select {
		case <-a.closed:
			return errors.New("the NATS connection closed")
		case <-connDone:
			return nil
		}
	}, func(error) { close(connDone) })
	for _, s := range a.servers {
		g.Add(func() error { return <-s.ended }, func(error) { s.shutdown() })
	}
	a.setStarting("")
	a.log.Info("serving", slog.String("nats_url", redact(a.URL)), slog.Int("workers", a.cfg.Workers),
		slog.String("consumer", consumer.RequestStream+"/"+consumer.Durable), slog.Duration("session_ttl", a.cfg.SessionTTL))
	go a.wait(&g)
}

// addWorkers adds the consumer, the quotas' refresh, the preparer and the
// sweeper to g, each stopped by its own context.
func (a *App) addWorkers(g *run.Group, runCtx context.Context) {
	part := func(f func(context.Context) error) {
		ctx, stop := context.WithCancel(runCtx)
		g.Add(func() error { return f(ctx) }, func(error) { stop() })
	}
	// The consumer, which drains, releases and waits for its work itself.
	part(func(ctx context.Context) error {
		if err := a.Consumer.Run(ctx); err != nil {
			return fmt.Errorf("consumer stopped: %w", err)
		}
		return nil
	})
	// The quotas' view of the store's usage, kept fresh.
	part(func(ctx context.Context) error { a.Quotas.Run(ctx); return nil })
	// The preparer: its work is only ever a head start, cancelled at once.
	part(a.Preparer.Run)
	if ttl := a.cfg.SessionTTL; ttl > 0 {
		every := a.cfg.SweepEvery
		if every <= 0 {
			every = min(max(ttl/10, time.Second), 5*time.Minute)
		}
		part(func(ctx context.Context) error { a.sweep(ctx, ttl, every); return nil })
	}
}

// wait runs g, then drains the connection and stops the embedded server.
func (a *App) wait(g *run.Group) {
	defer close(a.done)
	a.err = g.Run()
	a.log.Info("shutting down")
	// Drain flushes the acks and results still buffered, then closes.
	if err := a.NC.Drain(); err == nil {
		select {
		case <-a.closed:
		case <-time.After(10 * time.Second):
			a.log.Warn("NATS drain did not finish in 10s")
		}
	}
	if a.Server != nil {
		embedded.Stop(a.Server)
	}
	if a.err == nil {
		a.log.Info("stopped")
	}
}
