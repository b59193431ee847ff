package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/client"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

const breakerUsage = `  compactor breaker list
  compactor breaker show ID
  compactor breaker reset ID`

func runBreaker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return subcommand("breaker", map[string]func(context.Context, []string, io.Writer) error{
		"list": breakerList, "show": breakerShow, "reset": breakerReset,
	}, breakerUsage)(ctx, args, stdout, stderr)
}

func breakerList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("breaker list", flag.ContinueOnError)
	nf := addNATSFlags(fs, defaultNATSURL)
	pos, err := parseFlags(fs, args, stdout, "breaker list")
	if err != nil {
		return err
	}
	if err := noArgs(pos); err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, _ jetstream.JetStream, _ *kvstore.Sessions, breakers *kvstore.Breakers) error {
		list, err := breakers.List(ctx)
		if err != nil {
			return err
		}
		if list == nil {
			list = []session.Breaker{}
		}
		return printJSON(stdout, list)
	})
}

func breakerShow(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("breaker show", args, stdout)
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, _ jetstream.JetStream, _ *kvstore.Sessions, breakers *kvstore.Breakers) error {
		b, err := breakers.Breaker(ctx, sid)
		if err != nil {
			return err
		}
		return printJSON(stdout, b)
	})
}

// breakerReset closes the breaker in KV and, when it was open, publishes
// CompactionCircuitClosed; it works whether or not the service runs.
func breakerReset(ctx context.Context, args []string, stdout io.Writer) error {
	nf, sid, err := sessionArg("breaker reset", args, stdout)
	if err != nil {
		return err
	}
	counter, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		return err
	}
	return withStores(ctx, nf, func(ctx context.Context, js jetstream.JetStream, sessions *kvstore.Sessions, breakers *kvstore.Breakers) error {
		svc, err := pipeline.New(sessions, breakers, extractive.New(counter), pipeline.DefaultConfig())
		if err != nil {
			return err
		}
		prev, err := consumer.ResetBreaker(ctx, svc, &consumer.Publisher{JS: js, Source: client.DefaultSource}, sid)
		if err != nil {
			return fmt.Errorf("reset breaker of %s: %w", sid, err)
		}
		return printJSON(stdout, api.ResetAnswer{SessionID: sid, WasOpen: prev.Open(), Previous: prev})
	})
}
