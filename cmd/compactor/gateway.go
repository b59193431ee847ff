package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/gateway"
	"github.com/compactor/compactor/internal/standin"
	"github.com/compactor/compactor/internal/telemetry/otlp"
)

// gatewayFlags configure a gateway, alone or in serve.
type gatewayFlags struct {
	openai, anthropic *string
	window            *int
}

func addGatewayFlags(fs *flag.FlagSet) *gatewayFlags {
	return &gatewayFlags{
		openai:    fs.String("openai-url", "https://api.openai.com", "gateway: the upstream of the OpenAI APIs (/v1/chat/completions, /v1/responses): OpenAI or any compatible base `URL` (no /v1)"),
		anthropic: fs.String("anthropic-url", "https://api.anthropic.com", "gateway: the upstream of Anthropic's Messages API (/v1/messages): Anthropic or a compatible base `URL`"),
		window:    fs.Int("window", 0, "gateway: every model's context window in `TOKENS` (default: the model table's; an upstream's refusal lowers it)"),
	}
}

// config is the gateway's configuration from the flags.
func (f *gatewayFlags) config(log *slog.Logger, reg prometheus.Registerer) gateway.Config {
	return gateway.Config{Upstreams: map[string]string{"openai": *f.openai, "anthropic": *f.anthropic}, Window: *f.window,
		Logger: log, Metrics: gateway.NewMetrics(reg)}
}

// runGateway serves the provider APIs in front of the service.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	gf := addGatewayFlags(fs)
	listen := fs.String("listen", "127.0.0.1:8090", "serve the provider APIs on `ADDRESS`: agents take http://ADDRESS/v1 (OpenAI) or http://ADDRESS (Anthropic) as their base URL")
	keys := fs.String("keys", "", "a JSON `FILE` of gateway keys, each its tenant's NATS user: {\"keys\": {\"KEY\": {\"nats_user\": \"...\", \"nats_password\": \"...\"} or {\"nats_creds\": \"FILE\"}}}; a call names its key in the X-Compactor-Key header or as /k/KEY/ before the path (default: no keys, the --nats-url user's tenant)")
	metricsAddr := fs.String("metrics-addr", "127.0.0.1:9465", "serve Prometheus /metrics on `ADDRESS` (empty: off)")
	logFormat := fs.String("log-format", "text", "log `FORMAT`: text or json (to stderr)")
	pos, err := parseFlags(fs, args, stdout, "gateway [--listen ADDR] [--nats-url URL] [--keys FILE] [--openai-url URL] [--anthropic-url URL]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	log, err := newLogger(stderr, *logFormat, "info")
	if err != nil {
		return err
	}
	// Traces go where the OTEL_* environment says, as serve's.
	shutdown, err := otlp.Setup(ctx, buildVersion(), os.Getenv)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = shutdown(sctx)
	}()
	reg := prometheus.NewRegistry()
	cfg := gf.config(log, reg)
	conns, err := gatewayClients(ctx, nf, *keys, &cfg)
	if err != nil {
		return err
	}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	gw, err := gateway.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("%w: --listen: %v", errUsage, err)
	}
	if *metricsAddr != "" {
		go serveMetrics(ctx, *metricsAddr, reg, log)
	}
	return serveGateway(ctx, ln, gw, log)
}

// keysFile is --keys.
type keysFile struct {
	Keys map[string]struct {
		User     string `json:"nats_user"`
		Password string `json:"nats_password"`
		Creds    string `json:"nats_creds"`
	} `json:"keys"`
}

// gatewayClients connects the gateway: one connection, or one per key as
// its tenant's user.
func gatewayClients(ctx context.Context, nf *natsFlags, keys string, cfg *gateway.Config) ([]*nats.Conn, error) {
	opts, err := nf.options()
	if err != nil {
		return nil, err
	}
	if keys == "" {
		nc, _, err := dial(ctx, *nf.url, "compactor-gateway", opts...)
		if err != nil {
			return nil, err
		}
		cfg.Client, err = client.New(nc, client.WithSource(cliSource))
		return []*nats.Conn{nc}, err
	}
	b, err := os.ReadFile(keys)
	if err != nil {
		return nil, fmt.Errorf("%w: --keys: %v", errUsage, err)
	}
	var kf keysFile
	if err := json.Unmarshal(b, &kf); err != nil || len(kf.Keys) == 0 {
		return nil, fmt.Errorf("%w: --keys %s: want {\"keys\": {\"KEY\": {\"nats_user\", \"nats_password\"} or {\"nats_creds\"}}} (%v)", errUsage, keys, err)
	}
	cfg.Tenants = map[string]*client.Client{}
	var conns []*nats.Conn
	for key, k := range kf.Keys {
		o := append([]nats.Option(nil), nf.tlsOptions()...)
		switch {
		case k.Creds != "":
			o = append(o, nats.UserCredentials(k.Creds))
		case k.User != "":
			o = append(o, nats.UserInfo(k.User, k.Password))
		default:
			return conns, fmt.Errorf("%w: --keys: a key without nats_user or nats_creds", errUsage)
		}
		nc, _, err := dial(ctx, *nf.url, "compactor-gateway", o...)
		if err != nil {
			return conns, err
		}
		conns = append(conns, nc)
		if cfg.Tenants[key], err = client.New(nc, client.WithSource(cliSource)); err != nil {
			return conns, err
		}
	}
	return conns, nil
}

// serveGateway serves gw on ln until ctx ends.
func serveGateway(ctx context.Context, ln net.Listener, gw http.Handler, log *slog.Logger) error {
	log.Info("gateway: serving the OpenAI and Anthropic APIs", slog.String("openai_base_url", "http://"+ln.Addr().String()+"/v1"),
		slog.String("anthropic_base_url", "http://"+ln.Addr().String()))
	return serveUntil(ctx, ln, gw, 10*time.Second)
}

// serveMetrics serves reg's /metrics on addr until ctx ends.
func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("gateway: metrics", slog.String("error", err.Error()))
	}
}

// runStandin runs the stand-in model: a local server of the provider
// APIs to try the gateway (and agents) with, no key, no network.
func runStandin(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("standin", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8091", "serve on `ADDRESS`")
	window := fs.Int("window", 0, "refuse calls over `TOKENS` as the providers do (0: none)")
	delay := fs.Duration("delay", 0, "wait this long before answering")
	steps := fs.Int("steps", 0, "call the first tool a call offers this many times in a row, then answer \"done\" (0: answer every call with a short text)")
	toolArgs := fs.String("tool-args", "{}", "the JSON arguments of the tool calls --steps makes")
	pos, err := parseFlags(fs, args, stdout, "standin [--listen ADDR] [--window TOKENS]")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	script := standin.Echo
	if *steps > 0 {
		if !json.Valid([]byte(*toolArgs)) {
			return fmt.Errorf("%w: --tool-args is not JSON", errUsage)
		}
		script = standin.Steps(*steps, *toolArgs)
	}
	s, err := standin.Start(*listen, *window, script)
	if err != nil {
		return err
	}
	s.Delay = *delay
	fmt.Fprintf(stderr, "compactor standin: %s (OpenAI base URL %s/v1)\n", s.URL, s.URL)
	<-ctx.Done()
	s.Close()
	return nil
}
