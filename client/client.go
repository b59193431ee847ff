// Package client is the runtime's side of the compactor's contract, for Go
// runtimes: keep a session in the service (create, append, read the context
// to send to the model), ask for a compaction and wait for its one result,
// and follow the sessions' circuit breakers.
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

	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
)

// The contract's types, as the service writes them.
type (
	// Message is a chat message in OpenAI's chat format, with the id and
	// seq the service keeps; compaction messages carry their metadata.
	Message = session.Message
	// Content is a message's content: text, or a list of parts.
	Content = session.Content
	// Role is a message's role.
	Role = session.Role
	// ToolCall is a call an assistant message makes.
	ToolCall = session.ToolCall
	// Created answers Create.
	Created = sessions.Created
	// Appended answers Append: which messages were applied, and which
	// were stored already (a repeat).
	Appended = sessions.Appended
	// ContextView is what to send to the model: the summary, then the
	// messages after it.
	ContextView = sessions.ContextView
	// Deleted answers Delete.
	Deleted = sessions.Deleted
	// RequestData is the data of a compaction request: the session and
	// what the runtime knows of its model and context.
	RequestData = events.RequestData
	// CacheData is a request's prompt cache state (RequestData.Cache):
	// when the runtime last sent the context to its model, and how long
	// its provider keeps a prefix cached.
	CacheData = events.CacheData
	// Completed is the data of a CompactionCompleted event.
	Completed = pipeline.Result
	// Failed is the data of a CompactionFailed event.
	Failed = events.Failed
	// CircuitOpened is the data of a CompactionCircuitOpened event.
	CircuitOpened = events.CircuitOpened
	// CircuitClosed is the data of a CompactionCircuitClosed event.
	CircuitClosed = events.CircuitClosed
	// Breaker is a session's circuit breaker: its state and failures.
	Breaker = session.Breaker
	// History is a session's record, every message (summarised ones
	// marked with summarised_by), every compaction and its prepared one.
	History = sessions.History
)

// Roles.
const (
	System    = session.RoleSystem
	User      = session.RoleUser
	Assistant = session.RoleAssistant
	Tool      = session.RoleTool
)

// Text returns a message with text content. id is the client's id for it:
// an append repeated with the same id is applied once.
func Text(id string, role Role, text string) Message {
	return Message{ID: id, Role: role, Content: session.TextContent(text)}
}

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
	if !events.ValidSessionID(sid) {
		return fmt.Errorf("client: session id %q must be 1-200 letters, digits, '-' or '_'", sid)
	}
	return nil
}
