package gateway_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/gateway"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/standin"
	"github.com/compactor/compactor/internal/tokens"
)

// natsURL is the service's, run for the package's tests, svc the service.
var (
	natsURL string
	svc     *app.App
)

// TestMain runs the compactor on an embedded NATS server, as `compactor
// serve` does, with the offline summariser.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "compactor-gateway-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	svc, err = app.Start(context.Background(), app.Config{Provision: true, Embedded: embedded.Options{Port: -1, DataDir: dir},
		Pipeline: pipeline.DefaultConfig(), Summarizer: extractive.New(counter)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	natsURL = svc.URL
	code := m.Run()
	_ = svc.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// setup is a gateway in front of a stand-in upstream.
type setup struct {
	up  *standin.Server
	url string
	c   *client.Client
	gw  *gateway.Gateway
}

// start runs a stand-in with upWindow (0: none) and a gateway whose models
// have window, on the test's service.
func start(t *testing.T, window, upWindow int, script standin.Script) *setup {
	t.Helper()
	return startWith(t, gateway.Config{Window: window}, upWindow, script)
}

// startWith is start with a gateway configured as cfg (its upstreams and
// client set here).
func startWith(t *testing.T, cfg gateway.Config, upWindow int, script standin.Script) *setup {
	t.Helper()
	up, err := standin.Start("127.0.0.1:0", upWindow, script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(up.Close)
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstreams, cfg.Client = map[string]string{"openai": up.URL, "anthropic": up.URL}, c
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	gw, err := gateway.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &setup{up: up, url: serve(t, gw), c: c, gw: gw}
}

// serve runs h on a loopback port and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}
