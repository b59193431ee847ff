package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/config"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/gateway"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/migrate"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/telemetry/otlp"
	"github.com/compactor/compactor/internal/tokens"
)

// serveFlags are serve's own flags beside the pipeline's.
type serveFlags struct {
	nats        *natsFlags
	pf          *pipelineFlags
	host        *string
	port        *int
	dataDir     *string
	natsSync    *string
	provision   *bool
	replicas    *int
	shards      *int
	workers     *int
	prepWorkers *int
	recallMB    *int
	ackWait     *time.Duration
	maxDeliver  *int
	eventBytes  *byteSize
	grace       *time.Duration
	metricsAddr *string
	pprofAddr   *string
	ui          *bool
	logFormat   *string
	logLevel    *string
	source      *string
	sessionTTL  *time.Duration
	startWait   *time.Duration
	gateway     *string
	gf          *gatewayFlags
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
		natsSync:    fs.String("nats-sync", "always", "embedded server: sync its store to disk after every write (always: an acknowledged write survives a power loss), or every `DURATION` (faster; the writes of the last interval are lost in a power loss)"),
		provision:   fs.Bool("provision", true, "create or update the streams, buckets and consumer at start (needs rights to; without, they must exist)"),
		replicas:    fs.Int("replicas", 1, "replicas of every stream and bucket provisioned (3 on a cluster)"),
		shards:      fs.Int("shards", 0, "shards of a new session store, each a stream and a bucket with its own leader (default: as many as --replicas); a store keeps its count"),
		workers:     fs.Int("workers", consumer.DefaultWorkers, "requests held at once, each running or waiting behind its session's running one (model calls are I/O: far more than the cores)"),
		prepWorkers: fs.Int("prepare-workers", 4, "preparations run at once (they yield to requests)"),
		recallMB:    fs.Int("recall-memory", sessions.DefaultRecallMemory>>20, "`MiB` of search indexes this replica keeps (compactor.session.search): the least recently searched sessions' are dropped past it and built again from the store"),
		ackWait:     fs.Duration("ack-wait", consumer.AckWait, "the consumer's ack wait: how soon the work of a crashed replica is redelivered"),
		maxDeliver:  fs.Int("max-deliver", consumer.MaxDeliver, "deliveries of one request before it is dead-lettered"),
		eventBytes:  eventBytesFlag(fs),
		grace:       fs.Duration("shutdown-grace", 10*time.Second, "on SIGINT/SIGTERM, how long running compactions may finish before they are released to another replica"),
		metricsAddr: fs.String("metrics-addr", "127.0.0.1:9464", "serve Prometheus /metrics and /healthz on `ADDRESS` (empty: off)"),
		pprofAddr:   fs.String("pprof-addr", "", "serve net/http/pprof at /debug/pprof/ on `ADDRESS` (empty, the default: off)"),
		ui:          fs.Bool("ui", false, "serve the read-only inspector page at /ui/ on the metrics address (behind an operator's NATS user and password when the server requires authentication)"),
		logFormat:   fs.String("log-format", "text", "log `FORMAT`: text or json (to stderr)"),
		logLevel:    fs.String("log-level", "info", "log `LEVEL`: debug, info, warn or error"),
		source:      fs.String("source", events.DefaultSource, "CloudEvents `SOURCE` of the events published"),
		sessionTTL:  fs.Duration("session-ttl", 0, "delete sessions nobody wrote to for this `DURATION` (0: keep them)"),
		startWait:   fs.Duration("start-timeout", app.DefaultStartTimeout, "at start, how long to wait for NATS and JetStream (a server not up yet, a cluster electing its leaders) before exiting; /livez answers meanwhile"),
		gateway:     fs.String("gateway", "", "also serve the provider APIs' gateway (compactor gateway) on `ADDRESS`, as a runtime of this service with its NATS user (empty: off)"),
		gf:          addGatewayFlags(fs),
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
	if *sf.ui && *sf.metricsAddr == "" {
		return fmt.Errorf("%w: --ui serves the inspector page on the metrics address: give --metrics-addr", errUsage)
	}
	if *sf.workers < 1 || *sf.replicas < 1 || *sf.maxDeliver < 1 || *sf.ackWait < time.Second || *sf.sessionTTL < 0 || *sf.shards < 0 || *sf.startWait < 0 {
		return fmt.Errorf("%w: --workers, --replicas and --max-deliver must be >= 1, --ack-wait >= 1s, --session-ttl, --shards and --start-timeout >= 0", errUsage)
	}
	if _, err := sf.syncInterval(); err != nil {
		return err
	}
	log, err := newLogger(stderr, *sf.logFormat, *sf.logLevel)
	if err != nil {
		return err
	}
	// Traces go where the OTEL_* environment says; with none, nowhere.
	shutdown, err := otlp.Setup(ctx, buildVersion(), os.Getenv)
	if err != nil {
		return err
	}
	if otlp.Enabled(os.Getenv) {
		ep := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
		if ep == "" {
			ep = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		log.Info("exporting traces over OTLP", slog.String("endpoint", ep))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flushing traces", slog.String("error", err.Error()))
		}
	}()
	return serve(ctx, sf, log, nil)
}

// eventBytesFlag is --event-bytes: what the request, result and
// dead-letter streams may hold together.
func eventBytesFlag(fs *flag.FlagSet) *byteSize {
	b := byteSize(consumer.DefaultEventBytes)
	fs.Var(&b, "event-bytes", "the most the request, result and dead-letter streams hold together (a quarter, a half, a quarter), reserved in the server's store so that a full session store still takes results: `SIZE` such as 1GB; -1: no limit")
	return &b
}

// syncInterval is --nats-sync as the embedded server takes it (0: always).
func (sf *serveFlags) syncInterval() (time.Duration, error) {
	return parseSync("--nats-sync", *sf.natsSync)
}

// parseSync reads a sync flag: always (0), or a positive duration.
func parseSync(flag, v string) (time.Duration, error) {
	if v == "always" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: %s %q: want always or a duration such as 1s", errUsage, flag, v)
	}
	return d, nil
}

// serve runs the service until ctx is cancelled. ready, when set, is
// called once it serves (demo uses it).
func serve(ctx context.Context, sf *serveFlags, log *slog.Logger, ready func(url string)) error {
	counter, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		return err
	}
	sum, err := sf.pf.summarizer(counter)
	if err != nil {
		return err
	}
	opts, err := sf.nats.options()
	if err != nil {
		return err
	}
	sync, err := sf.syncInterval()
	if err != nil {
		return err
	}
	// SIGHUP reads the config file's tenants' policies again (caught from
	// before the service serves: a SIGHUP never ends it).
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	a, err := app.Start(ctx, app.Config{NATSURL: *sf.nats.url, NATSOptions: opts,
		Embedded:  embedded.Options{Host: *sf.host, Port: *sf.port, DataDir: *sf.dataDir, SyncInterval: sync},
		Provision: *sf.provision, Replicas: *sf.replicas, Shards: *sf.shards, AckWait: *sf.ackWait, MaxDeliver: *sf.maxDeliver, EventBytes: int64(*sf.eventBytes),
		Workers: *sf.workers, PrepareWorkers: *sf.prepWorkers, RecallMemory: *sf.recallMB << 20, ShutdownGrace: *sf.grace, Source: *sf.source, MetricsAddr: *sf.metricsAddr, PprofAddr: *sf.pprofAddr,
		UI: *sf.ui, SignInOptions: sf.nats.tlsOptions(),
		SessionTTL: *sf.sessionTTL, StartTimeout: *sf.startWait, Version: semver(), Pipeline: sf.pf.cfg, Models: sf.pf.conf.Models, Summarizer: sum, Logger: log,
		Tenants: sf.pf.conf.Policies(), Limits: sf.pf.conf.Limits()})
	if err != nil {
		return err
	}
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		for {
			select {
			case <-hup:
				reloadTenants(sf.pf.path, a, log)
			case <-stopped:
				return
			}
		}
	}()
	log.Info("provider", slog.String("provider", *sf.pf.provider))
	if *sf.gateway != "" {
		if err := startGateway(ctx, sf, a, opts, log); err != nil {
			_ = a.Stop()
			return err
		}
	}
	if ready != nil {
		ready(a.URL)
	}
	return a.Wait()
}

// startGateway serves the gateway beside the service, connected to it as
// a runtime is.
func startGateway(ctx context.Context, sf *serveFlags, a *app.App, opts []nats.Option, log *slog.Logger) error {
	ln, err := net.Listen("tcp", *sf.gateway)
	if err != nil {
		return fmt.Errorf("%w: --gateway: %v", errUsage, err)
	}
	nc, _, err := dial(ctx, a.URL, "compactor-gateway", opts...)
	if err != nil {
		ln.Close()
		return err
	}
	cfg := sf.gf.config(log, a.Metrics.Registry())
	if cfg.Client, err = client.New(nc, client.WithSource(cliSource)); err != nil {
		nc.Close()
		ln.Close()
		return err
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		nc.Close()
		ln.Close()
		return err
	}
	go func() {
		defer nc.Close()
		if err := serveGateway(ctx, ln, gw, log); err != nil {
			log.Error("gateway", slog.String("error", err.Error()))
		}
	}()
	return nil
}

// reloadTenants applies the config file's tenants' policies and quotas to
// the running service; a file that does not load changes nothing.
func reloadTenants(path string, a *app.App, log *slog.Logger) {
	if path == "" {
		log.Warn("SIGHUP: no --config file to read the tenants' policies from")
		return
	}
	conf, err := config.Load(path)
	if err != nil {
		log.Error("SIGHUP: the config file does not load; the tenants' policies are unchanged", slog.String("error", err.Error()))
		return
	}
	a.SetTenants(conf.Policies(), conf.Limits())
	log.Info("tenants' policies reloaded", slog.String("config", path), slog.Int("tenants", len(conf.Tenants)))
}

// semverRE is SemVer 2.0's grammar, loosely.
var semverRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// semver is the version as micro wants it (SemVer, no "v").
func semver() string {
	if v := strings.TrimPrefix(buildVersion(), "v"); semverRE.MatchString(v) {
		return v
	}
	return client.Version + "-dev"
}

func runProvision(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("provision", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	replicas := fs.Int("replicas", 1, "replicas of every stream and bucket (3 on a cluster)")
	shards := fs.Int("shards", 0, "shards of a new session store (default: as many as --replicas); a store keeps its count")
	ackWait := fs.Duration("ack-wait", consumer.AckWait, "the consumer's ack wait")
	maxDeliver := fs.Int("max-deliver", consumer.MaxDeliver, "deliveries of one request before it is dead-lettered")
	eventBytes := eventBytesFlag(fs)
	pos, err := parseFlags(fs, args, stdout, "provision [--nats-url URL] [--replicas N] [--shards N]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *replicas < 1 || *maxDeliver < 1 || *ackWait < time.Second || *shards < 0 {
		return fmt.Errorf("%w: --replicas and --max-deliver must be >= 1, --ack-wait >= 1s, --shards >= 0", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := nf.connect(ctx, "compactor-provision", "provision needs the admin user")
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.err(app.ProvisionAll(c.ctx, c.nc, c.js, app.Provisioning{Replicas: *replicas, Shards: *shards, AckWait: *ackWait, MaxDeliver: *maxDeliver,
		EventBytes: int64(*eventBytes)})); err != nil {
		return err
	}
	s, err := kvstore.NewSessions(c.ctx, c.nc, c.js)
	if err != nil {
		return err
	}
	streams := []string{consumer.RequestStream, consumer.ResultStream, consumer.DLQStream}
	buckets := []string{kvstore.MetaBucket, kvstore.BreakersBucket}
	for n := range s.Shards() {
		streams, buckets = append(streams, kvstore.DataStream(n)), append(buckets, kvstore.RecordsBucket(n))
	}
	return printJSON(stdout, map[string]any{"streams": streams, "buckets": buckets, "shards": s.Shards(), "consumer": consumer.Durable, "replicas": *replicas})
}

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	replicas := fs.Int("replicas", 1, "replicas of the sharded store's streams and buckets, when it is provisioned here")
	shards := fs.Int("shards", 0, "shards of the sharded store, when it is made here (default: as many as --replicas)")
	pos, err := parseFlags(fs, args, stdout, "migrate [--nats-url URL] [--replicas N] [--shards N]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	if *replicas < 1 || *shards < 0 {
		return fmt.Errorf("%w: --replicas must be >= 1, --shards >= 0", errUsage)
	}
	c, err := nf.connect(ctx, "compactor-migrate", "migrate needs the admin user")
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.err(kvstore.Provision(c.ctx, c.js, kvstore.ProvisionOptions{Replicas: *replicas, Shards: *shards})); err != nil {
		return err
	}
	store, err := kvstore.NewSessions(c.ctx, c.nc, c.js)
	if err != nil {
		return err
	}
	r, err := migrate.Run(ctx, c.nc, c.js, store, func(sid string, r migrate.Report) {
		fmt.Fprintf(stderr, "migrated %s (%d sessions so far)\n", sid, r.Sessions+r.Already)
	})
	if err != nil {
		return c.err(err)
	}
	return printJSON(stdout, r)
}
