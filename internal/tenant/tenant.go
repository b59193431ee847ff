// Package tenant is who a request, a session call or an event belongs to.
//
// A tenant is a NATS account. The compactor runs in its own account and
// exports its subjects as services and streams with the importing account's
// name at a fixed token (account_token_position): a tenant's runtime calls
// compactor.session.create in its own account, and the service receives
// tenant.<account>.compactor.session.create. The server writes that token,
// so the tenant is proved by the server, never taken from a body. Subjects
// without the prefix belong to the default tenant: a deployment without
// accounts (the embedded server, make run) has only that one.
package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// Default is the tenant of the subjects without a tenant prefix: every
// session of a deployment without accounts. The store keeps its sessions
// where it always did.
const Default = "_"

// Prefix starts every tenant's subject in the compactor's account:
// tenant.<name>.<the subject the tenant called>.
const Prefix = "tenant."

// TokenPosition is the tenant's token in those subjects (1-based, as
// account_token_position counts).
const TokenPosition = 2

var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Check reports whether name can be a tenant: 1-64 letters, digits, '-'
// or '_' (an account name in the server's config, or an account's public
// key in operator mode), and not the default tenant's "_".
func Check(name string) error {
	if name == Default || !validName.MatchString(name) {
		return fmt.Errorf("tenant %q: must be 1-64 letters, digits, '-' or '_', and not %q", name, Default)
	}
	return nil
}

// Split returns the tenant of a subject in the compactor's account and
// the subject as the tenant called it: tenant.A.compactor.compact is A's
// compactor.compact; a subject without the prefix is the default
// tenant's. ok is false for a prefixed subject whose tenant is not valid.
func Split(subject string) (name, rest string, ok bool) {
	after, found := strings.CutPrefix(subject, Prefix)
	if !found {
		return Default, subject, true
	}
	name, rest, found = strings.Cut(after, ".")
	if !found || Check(name) != nil || rest == "" {
		return "", "", false
	}
	return name, rest, true
}

// Subject is the subject in the compactor's account that name's subject
// maps to (the default tenant's is the subject itself).
func Subject(name, subject string) string {
	if name == Default || name == "" {
		return subject
	}
	return Prefix + name + "." + subject
}

// Wildcard is the subject matching every tenant's subject (not the default
// tenant's): tenant.*.<subject>.
func Wildcard(subject string) string { return Prefix + "*." + subject }

type key struct{}

// With returns ctx carrying name as its tenant.
func With(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, key{}, name)
}

// From is ctx's tenant: the default tenant when none was set.
func From(ctx context.Context) string {
	if name, ok := ctx.Value(key{}).(string); ok && name != "" {
		return name
	}
	return Default
}

// RequestInfoHeader is the header the server sets on a request that came
// through a service import: the calling account (acc) and, where the
// import shares it, the user.
const RequestInfoHeader = "Nats-Request-Info"

// Caller is who made a request, as the server says.
type Caller struct {
	Account string `json:"acc"`
	User    string `json:"user,omitempty"`
	Name    string `json:"name,omitempty"`
}

// CallerOf reads the server's Nats-Request-Info header; ok is false when
// there is none (a request from within the compactor's account).
func CallerOf(header string) (Caller, bool) {
	if header == "" {
		return Caller{}, false
	}
	var c Caller
	if err := json.Unmarshal([]byte(header), &c); err != nil || c.Account == "" {
		return Caller{}, false
	}
	return c, true
}

// Verify checks a request's tenant (from its subject) against the account
// the server says called: a request through an import must name the
// importing account; a request with no such header came from within the
// compactor's account (the service's own users, operators), whose users
// may act for any tenant their permissions let them reach.
func Verify(name, requestInfo string) error {
	c, ok := CallerOf(requestInfo)
	if !ok {
		return nil
	}
	if c.Account != name {
		return fmt.Errorf("the request's subject names tenant %q, but the server says account %q called", name, c.Account)
	}
	return nil
}

// Session names a session across tenants: a tenant's session id, which
// another tenant may use too.
type Session struct {
	Tenant string `json:"tenant"`
	ID     string `json:"session_id"`
}

// MsgID is the Nats-Msg-Id of a tenant's event of id: the id itself for
// the default tenant, prefixed with the tenant for another, so that two
// tenants' events of one id (their requests' ids are theirs to choose) are
// not taken for duplicates of each other in one stream.
func MsgID(name, id string) string {
	if name == Default || name == "" {
		return id
	}
	return name + ":" + id
}

// LogHandler adds the tenant of a record's context (when it is not the
// default tenant) to every record it handles: a line logged with a
// request's context names the request's tenant.
type LogHandler struct{ slog.Handler }

// Handle implements slog.Handler.
func (h LogHandler) Handle(ctx context.Context, r slog.Record) error {
	if t := From(ctx); t != Default {
		r = r.Clone()
		r.AddAttrs(slog.String("tenant", t))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h LogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return LogHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h LogHandler) WithGroup(name string) slog.Handler {
	return LogHandler{h.Handler.WithGroup(name)}
}

// Key names a tenant's session among a process's sessions of every
// tenant (a session id has no '.').
func Key(name, sessionID string) string { return name + "." + sessionID }

// Of is the tenant of a request on subject in the compactor's account, and
// the subject as the tenant called it, once the server's word on the
// caller (requestInfo, its Nats-Request-Info) agrees: ErrNoTenant for a
// subject that names no valid tenant, ErrNotCaller for one the server
// says another account called.
func Of(subject, requestInfo string) (name, rest string, err error) {
	name, rest, ok := Split(subject)
	if !ok {
		return "", "", fmt.Errorf("%w: subject %q", ErrNoTenant, subject)
	}
	if err := Verify(name, requestInfo); err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrNotCaller, err)
	}
	return name, rest, nil
}

// Errors of Of.
var (
	ErrNoTenant  = errors.New("names no valid tenant")
	ErrNotCaller = errors.New("not the calling account's")
)
