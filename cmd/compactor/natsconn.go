package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/sessions"
)

const defaultNATSURL = "nats://127.0.0.1:4222"

// natsFlags say how to reach NATS. Credentials go in the URL
// (nats://user:password@host:port) or in a creds file.
type natsFlags struct {
	url   *string
	creds *string
}

func addNATSFlags(fs *flag.FlagSet, def string) *natsFlags {
	usage := "NATS server `URL` (user:password@ in it for nats.conf users)"
	if def == "" {
		usage += " (default: run an embedded server)"
	}
	return &natsFlags{
		url:   fs.String("nats-url", def, usage),
		creds: fs.String("nats-creds", "", "NATS credentials `FILE` (JWT and nkey seed)"),
	}
}

// connect opens a connection for a command. Errors say what to check.
func (n *natsFlags) connect(ctx context.Context, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	return dial(ctx, *n.url, *n.creds, name, log, extra...)
}

func dial(ctx context.Context, url, creds, name string, log *slog.Logger, extra ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts := []nats.Option{nats.Name(name), nats.Timeout(5 * time.Second)}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	if log != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			// Permission violations arrive here; the request itself only times out.
			log.Warn("nats", slog.String("subject", subj), slog.String("error", err.Error()))
		}))
	}
	opts = append(opts, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w (is `compactor serve` or nats-server running? see --nats-url)", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// stores are a CLI command's handles on the buckets.
type stores struct {
	js       jetstream.JetStream
	kv       *kvstore.Sessions
	breakers *kvstore.Breakers
	sessions *sessions.Service
}

// withStores connects for a CLI command, binds the buckets and runs f,
// all within opTimeout.
func withStores(ctx context.Context, nf *natsFlags, f func(context.Context, stores) error) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	// A request the user may not make is never answered: the server
	// reports the violation apart, and it ends the command at once.
	ctx, deny := context.WithCancelCause(ctx)
	defer deny(nil)
	nc, js, err := nf.connect(ctx, "compactor-cli", nil, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			deny(fmt.Errorf("%w (this NATS user may not do it: the CLI's session and breaker commands need the compactor or admin user)", err))
		}
	}))
	if err != nil {
		return err
	}
	defer nc.Close()
	st, err := bind(ctx, nc, js, nil)
	if err == nil {
		err = f(ctx, st)
	}
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return err
}

// bind binds the provisioned buckets; table counts tokens (nil: the
// shipped model table).
func bind(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, table *models.Table) (stores, error) {
	s, err := kvstore.NewSessions(ctx, nc, js)
	if err == nil {
		var b *kvstore.Breakers
		if b, err = kvstore.NewBreakers(ctx, nc, js); err == nil {
			return stores{js: js, kv: s, breakers: b, sessions: sessions.New(s, b, table)}, nil
		}
	}
	return stores{}, app.BucketHint(err)
}
