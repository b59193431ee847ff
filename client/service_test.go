package client_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tokens"
)

// startService runs the compactor on an embedded NATS server, as `compactor
// serve` does, with the offline summariser.
func startService(dir string) (*app.App, error) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	return app.Start(context.Background(), app.Config{Provision: true, Embedded: embedded.Options{Port: -1, DataDir: dir},
		Pipeline: pipeline.DefaultConfig(), Summarizer: extractive.New(counter)})
}

// TestMain runs a service for the Example, which, as a runtime does,
// finds it at NATS_URL.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "compactor-client-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	svc, err := startService(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("NATS_URL", svc.URL)
	code := m.Run()
	_ = svc.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}
