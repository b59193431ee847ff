// Package client is the runtime's side of the compactor's contract, for Go
// runtimes: keep a session in the service (create, append, read the context
// to send to the model), ask for a compaction and wait for its one result,
// and follow the sessions' circuit breakers.
//
// Every call names its session the same way: the session id is the
// argument after the context. Its types are the contract's (types.go),
// decoded from the service's JSON; a failed compaction is a *FailedError
// that errors.Is matches with the reason's sentinel (ErrSummaryFailed,
// ErrCircuitOpen, ...).
//
// Sessions are written and read through the service's NATS micro endpoints
// (compactor.session.*); compactions are requested with a CloudEvent on
// agent.context.over_budget.<session> or agent.context.overflow.<session>
// (Compact), or synchronously through compactor.compact (CompactSync). Both
// are safe to repeat: a create or append repeated with the same message ids,
// and a compaction repeated with the same request id, are applied once.
//
// A Client is safe for concurrent use. It does not own the connection.
package client

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
)

// DefaultSource is the CloudEvents source of a client's requests.
const DefaultSource = "urn:compactor:client"

// DefaultTimeout bounds one endpoint request.
const DefaultTimeout = 30 * time.Second

// Option configures a Client.
type Option func(*Client) error

// WithSource sets the CloudEvents source of the client's requests: a
// URI-reference naming the runtime, such as "urn:acme:agent-runtime".
func WithSource(source string) Option {
	return func(c *Client) error {
		if source == "" {
			return errors.New("client: source must not be empty")
		}
		if _, err := url.Parse(source); err != nil {
			return fmt.Errorf("client: source %q is not a URI-reference: %w", source, err)
		}
		c.source = source
		return nil
	}
}

// WithTimeout bounds each endpoint request that the caller's context does
// not bound sooner (default DefaultTimeout).
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("client: timeout %v must be positive", d)
		}
		c.timeout = d
		return nil
	}
}

// Client talks to the compactor over one NATS connection.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	source  string
	timeout time.Duration
}

// New returns a client on nc, which must be connected (or reconnecting).
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: no NATS connection")
	}
	if nc.IsClosed() {
		return nil, errors.New("client: the NATS connection is closed")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{nc: nc, js: js, source: DefaultSource, timeout: DefaultTimeout}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// checkSession validates a session id before anything is sent.
func checkSession(sid string) error {
	if err := contract.CheckSessionID(sid); err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return nil
}
