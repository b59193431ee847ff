package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
)

const defaultNATSURL = "nats://127.0.0.1:4222"

// natsFlags say how to reach NATS. Credentials go in the URL
// (nats://user:password@host:port) or in a creds file; TLS takes a CA and,
// for servers that verify clients, a certificate and key.
type natsFlags struct {
	url, creds             *string
	tlsCA, tlsCert, tlsKey *string
	// tenant, on the store commands: whose sessions and breakers.
	tenant *string
}

// addTenantFlag adds --tenant to a command that uses the store.
func (n *natsFlags) addTenantFlag(fs *flag.FlagSet) {
	n.tenant = fs.String("tenant", "", "the tenant (its NATS `ACCOUNT` name in nats.conf) whose sessions and breakers to use (default: the default tenant, that of a deployment without accounts)")
}

func addNATSFlags(fs *flag.FlagSet, def string) *natsFlags {
	usage := "NATS server `URL` (user:password@ in it for nats.conf users; tls:// for TLS)"
	if def == "" {
		usage += " (default: run an embedded server)"
	}
	return &natsFlags{
		url:     fs.String("nats-url", def, usage),
		creds:   fs.String("nats-creds", "", "NATS credentials `FILE` (JWT and nkey seed)"),
		tlsCA:   fs.String("tls-ca", "", "CA certificate `FILE` (PEM) that signed the NATS server's certificate"),
		tlsCert: fs.String("tls-cert", "", "client certificate `FILE` (PEM), for a server that verifies clients (with --tls-key)"),
		tlsKey:  fs.String("tls-key", "", "client key `FILE` (PEM) of --tls-cert"),
	}
}

// options returns the connection's credentials and TLS options; a missing
// file or a certificate without its key is a usage error.
func (n *natsFlags) options() ([]nats.Option, error) {
	if err := checkNATSURL(*n.url); err != nil {
		return nil, err
	}
	var opts []nats.Option
	for flagName, f := range map[string]string{"nats-creds": *n.creds, "tls-ca": *n.tlsCA, "tls-cert": *n.tlsCert, "tls-key": *n.tlsKey} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%w: --%s: %v", errUsage, flagName, err)
		}
	}
	if (*n.tlsCert == "") != (*n.tlsKey == "") {
		return nil, fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	if *n.creds != "" {
		opts = append(opts, nats.UserCredentials(*n.creds))
	}
	return append(opts, n.tlsOptions()...), nil
}

// tlsOptions are the connection's TLS options alone (the inspector's
// sign-in connects as another user, over the same TLS).
func (n *natsFlags) tlsOptions() []nats.Option {
	var opts []nats.Option
	if *n.tlsCA != "" {
		opts = append(opts, nats.RootCAs(*n.tlsCA))
	}
	if *n.tlsCert != "" {
		opts = append(opts, nats.ClientCert(*n.tlsCert, *n.tlsKey))
	}
	return opts
}

// user names the NATS user a connection authenticates as, for errors.
func (n *natsFlags) user() string {
	first, _, _ := strings.Cut(*n.url, ",") // a cluster's nodes: the same user, as a rule
	if u, err := url.Parse(strings.TrimSpace(first)); err == nil && u.User != nil && u.User.Username() != "" {
		return fmt.Sprintf("NATS user %q", u.User.Username())
	}
	if *n.creds != "" {
		return fmt.Sprintf("the NATS user of %s", *n.creds)
	}
	return "this NATS user"
}

// conn is a command's connection. Its context ends, with the violation as
// its cause, when the server refuses one of the command's publishes or
// subscriptions: a request the user may not make is never answered, and
// the command would otherwise wait for its timeout.
type conn struct {
	ctx  context.Context
	nc   *nats.Conn
	js   jetstream.JetStream
	stop context.CancelCauseFunc
}

// Close closes the connection.
func (c *conn) Close() {
	c.stop(nil)
	c.nc.Close()
}

// err returns the violation that ended the command, if one did, else err.
func (c *conn) err(err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(c.ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return err
}

// connect opens a connection for a command; need says which users may run
// it, for the error a permission violation gives. Errors say what to check.
func (n *natsFlags) connect(ctx context.Context, name, need string) (*conn, error) {
	opts, err := n.options()
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancelCause(ctx)
	who := n.user()
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			stop(fmt.Errorf("%s may not do this: %w (%s; see nats.conf)", who, err, need))
		}
	}))
	nc, js, err := dial(ctx, *n.url, name, opts...)
	if err != nil {
		stop(nil)
		return nil, err
	}
	return &conn{ctx: ctx, nc: nc, js: js, stop: stop}, nil
}

// dial connects to url. Its error says what to check: whether anything
// listens there, the credentials, or TLS.
func dial(ctx context.Context, url, name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts = append([]nats.Option{nats.Name(name), nats.Timeout(5 * time.Second)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		hint := ""
		switch {
		case errors.Is(err, nats.ErrNoServers):
			hint = " (is `compactor serve` or nats-server running there? see --nats-url)"
		case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked):
			hint = " (check the user and password in --nats-url, or --nats-creds)"
		case errors.Is(err, nats.ErrSecureConnRequired), errors.Is(err, nats.ErrSecureConnWanted), strings.Contains(err.Error(), "tls"), strings.Contains(err.Error(), "x509"):
			hint = " (check tls:// in --nats-url, --tls-ca, --tls-cert and --tls-key)"
		}
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w%s", redactURL(url), err, hint)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// redactURL hides the passwords in a URL, or in each URL of a
// comma-separated list (a cluster's nodes).
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			// Unreadable: hide whatever stands between "//" and "@".
			if at := strings.LastIndex(p, "@"); at >= 0 {
				if sl := strings.Index(p, "//"); sl >= 0 && sl < at {
					parts[i] = p[:sl+2] + "xxxxx" + p[at:]
				}
			}
			continue
		}
		if u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
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
	if nf.tenant != nil && *nf.tenant != "" && *nf.tenant != tenant.Default {
		if err := tenant.Check(*nf.tenant); err != nil {
			return fmt.Errorf("%w: --tenant: %v", errUsage, err)
		}
		ctx = tenant.With(ctx, *nf.tenant)
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	c, err := nf.connect(ctx, "compactor-cli", "the CLI's session and breaker commands need the compactor or admin user")
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := bind(c.ctx, c.nc, c.js, nil)
	if err == nil {
		err = f(c.ctx, st)
	}
	return c.err(err)
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

// checkNATSURL refuses a --nats-url that names no NATS server: each of its
// comma-separated URLs is nats://, tls://, ws:// or wss:// (or host:port,
// which nats.go reads as nats://). "" is no URL (the embedded server).
func checkNATSURL(s string) error {
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		scheme, _, ok := strings.Cut(u, "://")
		if !ok {
			continue
		}
		switch strings.ToLower(scheme) {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("%w: --nats-url %s: %q is not a NATS scheme: use nats://host:4222 (tls:// for TLS, ws:// or wss:// for a websocket port)", errUsage, redactURL(u), scheme)
		}
	}
	return nil
}
