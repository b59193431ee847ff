package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/metrics"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
)

// serveFlags are serve's own flags beside the pipeline's.
type serveFlags struct {
	nats        *natsFlags
	pf          *pipelineFlags
	host        *string
	port        *int
	dataDir     *string
	provision   *bool
	replicas    *int
	workers     *int
	ackWait     *time.Duration
	maxDeliver  *int
	grace       *time.Duration
	metricsAddr *string
	logFormat   *string
	logLevel    *string
	source      *string
}

func addServeFlags(fs *flag.FlagSet, args []string) (*serveFlags, error) {
	pf, err := addPipelineFlags(fs, args, "")
	if err != nil {
		return nil, err
	}
	return &serveFlags{
		nats:        addNATSFlags(fs, ""),
		pf:          pf,
		host:        fs.String("nats-host", "127.0.0.1", "embedded server: listen `ADDRESS`"),
		port:        fs.Int("nats-port", embedded.DefaultPort, "embedded server: client `PORT` (-1: any free port)"),
		dataDir:     fs.String("data-dir", "data", "embedded server: JetStream store `DIR`"),
		provision:   fs.Bool("provision", true, "create or update the streams, buckets and consumer at start (needs rights to; without, they must exist)"),
		replicas:    fs.Int("replicas", 1, "replicas of every stream and bucket provisioned (3 on a cluster)"),
		workers:     fs.Int("workers", 8, "compactions run at once"),
		ackWait:     fs.Duration("ack-wait", consumer.AckWait, "the consumer's ack wait: how soon the work of a crashed replica is redelivered"),
		maxDeliver:  fs.Int("max-deliver", consumer.MaxDeliver, "deliveries of one request before it is dead-lettered"),
		grace:       fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, how long running compactions may finish before they are released to another replica"),
		metricsAddr: fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus /metrics and /healthz on `ADDRESS` (empty: off)"),
		logFormat:   fs.String("log-format", "text", "log `FORMAT`: text or json (to stderr)"),
		logLevel:    fs.String("log-level", "info", "log `LEVEL`: debug, info, warn or error"),
		source:      fs.String("source", consumer.DefaultSource, "CloudEvents `SOURCE` of the events published"),
	}, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
	}
	o := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, format)
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	sf, err := addServeFlags(fs, args)
	if err != nil {
		return err
	}
	pos, err := parseFlags(fs, args, stdout, "serve [--nats-url URL | --data-dir DIR --nats-port N] [flags]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if err := sf.pf.validate(); err != nil {
		return err
	}
	if *sf.workers < 1 || *sf.replicas < 1 || *sf.maxDeliver < 1 || *sf.ackWait < time.Second {
		return fmt.Errorf("%w: --workers, --replicas and --max-deliver must be >= 1, --ack-wait >= 1s", errUsage)
	}
	log, err := newLogger(stderr, *sf.logFormat, *sf.logLevel)
	if err != nil {
		return err
	}
	return serve(ctx, sf, log, nil)
}

// serve runs the service until ctx is cancelled. ready, when set, is
// called once it consumes (demo uses it).
func serve(ctx context.Context, sf *serveFlags, log *slog.Logger, ready func(url string)) error {
	url := *sf.nats.url
	var srv *server.Server
	if url == "" {
		var err error
		srv, err = embedded.Start(embedded.Options{Host: *sf.host, Port: *sf.port, DataDir: *sf.dataDir, Logger: log})
		if err != nil {
			return err
		}
		defer embedded.Stop(srv)
		url = srv.ClientURL()
		log.Info("embedded nats-server started", slog.String("url", url), slog.String("data_dir", *sf.dataDir))
	}
	closed := make(chan struct{})
	nc, js, err := dial(ctx, url, *sf.nats.creds, "compactor", log,
		nats.MaxReconnects(-1), nats.ReconnectWait(time.Second), nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS", slog.String("error", err.Error()))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("reconnected to NATS", slog.String("url", c.ConnectedUrlRedacted())) }),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return err
	}
	defer func() {
		if !nc.IsClosed() {
			nc.Close()
		}
	}()

	setup, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if *sf.provision {
		if err := provisionAll(setup, js, *sf.replicas, *sf.ackWait, *sf.maxDeliver); err != nil {
			return err
		}
	}
	sessions, breakers, err := stores(setup, nc, js)
	if err != nil {
		return err
	}
	counter, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		return err
	}
	sum, err := sf.pf.summarizer(counter)
	if err != nil {
		return err
	}
	svc, err := pipeline.New(sessions, breakers, sum, sf.pf.cfg, pipeline.WithModels(sf.pf.conf.Models), pipeline.WithLogger(log))
	if err != nil {
		return err
	}

	var cons *consumer.Consumer
	m := metrics.New(func() consumer.Stats { return cons.Stats() })
	cons = consumer.New(nc, js, svc, consumer.Options{Workers: *sf.workers, Source: *sf.source, Logger: log,
		ShutdownGrace: *sf.grace, Observe: m.Observe})
	pub := &consumer.Publisher{JS: js, Source: *sf.source}
	apiSrv, err := api.Start(ctx, nc, api.Deps{Pipeline: svc, Publisher: pub, Sessions: sessions, Breakers: breakers,
		Models: sf.pf.conf.Models, Logger: log, Version: semver(), Workers: *sf.workers, Observe: m.Observe, ShutdownGrace: *sf.grace,
		Stats: func() any { return cons.Stats() }})
	if err != nil {
		return err
	}
	defer apiSrv.Stop()

	if *sf.metricsAddr != "" {
		stop, addr, err := serveMetrics(*sf.metricsAddr, m, nc, log)
		if err != nil {
			return err
		}
		defer stop()
		log.Info("metrics", slog.String("url", "http://"+addr+"/metrics"))
	}

	log.Info("serving", slog.String("nats_url", redact(url)), slog.String("provider", *sf.pf.provider),
		slog.Int("workers", *sf.workers), slog.String("consumer", consumer.RequestStream+"/"+consumer.Durable))
	if ready != nil {
		ready(url)
	}
	runErr := cons.Run(ctx)
	log.Info("shutting down")
	if err := apiSrv.Stop(); err != nil {
		log.Warn("stop micro service", slog.String("error", err.Error()))
	}
	// Drain flushes the acks and results still buffered, then closes.
	if err := nc.Drain(); err == nil {
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			log.Warn("NATS drain did not finish in 10s")
		}
	}
	if runErr != nil {
		return fmt.Errorf("consumer stopped: %w", runErr)
	}
	log.Info("stopped")
	return nil
}

// provisionAll provisions the buckets, the streams and the consumer.
func provisionAll(ctx context.Context, js jetstream.JetStream, replicas int, ackWait time.Duration, maxDeliver int) error {
	if err := kvstore.Provision(ctx, js, replicas); err != nil {
		return permissionHint(err)
	}
	if err := consumer.Provision(ctx, js, consumer.Settings{Replicas: replicas, AckWait: ackWait, MaxDeliver: maxDeliver}); err != nil {
		return permissionHint(err)
	}
	return nil
}

func permissionHint(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("%w (a NATS user without the right to create streams sees a timeout: provision as an admin with `compactor provision`, then serve with --provision=false)", err)
	}
	return err
}

// serveMetrics serves /metrics and /healthz (200 while connected to NATS).
func serveMetrics(addr string, m *metrics.Metrics, nc *nats.Conn, log *slog.Logger) (func(), string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "not connected to NATS: "+nc.Status().String(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", slog.String("error", err.Error()))
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, l.Addr().String(), nil
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

// semver is the version as micro wants it (SemVer).
func semver() string {
	if version == "dev" {
		return "0.0.0-dev"
	}
	return strings.TrimPrefix(version, "v")
}

func runProvision(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	replicas := fs.Int("replicas", 1, "replicas of every stream and bucket (3 on a cluster)")
	ackWait := fs.Duration("ack-wait", consumer.AckWait, "the consumer's ack wait")
	maxDeliver := fs.Int("max-deliver", consumer.MaxDeliver, "deliveries of one request before it is dead-lettered")
	pos, err := parseFlags(fs, args, stdout, "provision [--nats-url URL] [--replicas N]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *replicas < 1 || *maxDeliver < 1 || *ackWait < time.Second {
		return fmt.Errorf("%w: --replicas and --max-deliver must be >= 1, --ack-wait >= 1s", errUsage)
	}
	nc, js, err := nf.connect(ctx, "compactor-provision", nil)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := provisionAll(ctx, js, *replicas, *ackWait, *maxDeliver); err != nil {
		return err
	}
	return printJSON(stdout, map[string]any{"streams": []string{consumer.RequestStream, consumer.ResultStream, consumer.DLQStream},
		"buckets": []string{kvstore.SessionsBucket, kvstore.BreakersBucket}, "consumer": consumer.Durable, "replicas": *replicas})
}
