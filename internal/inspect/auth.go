package inspect

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/contract"
)

// ErrUnauthenticated is a request without credentials, or with ones the
// NATS server refuses.
var ErrUnauthenticated = errors.New("inspect: not signed in")

// ErrNotOperator is a NATS user that signed in but is not an operator.
var ErrNotOperator = errors.New("inspect: not an operator")

// Authenticator checks a request's credentials: nil for an operator,
// ErrUnauthenticated or ErrNotOperator (wrapped) for a refusal, any other
// error when it cannot tell now.
type Authenticator interface {
	Authenticate(ctx context.Context, user, password string) error
}

// AuthFunc is an Authenticator.
type AuthFunc func(ctx context.Context, user, password string) error

// Authenticate calls f.
func (f AuthFunc) Authenticate(ctx context.Context, user, password string) error {
	return f(ctx, user, password)
}

// NATSAuth takes the page's credentials for a NATS user and password and
// has the server judge them: it connects as that user and asks what only
// an operator may — the session list of the default tenant
// (compactor.session.list, which nats.conf denies runtimes and observers,
// and which a tenant's user reaches only as its own tenant's list) and a
// bucket's stream info (only the service's account has the buckets). The
// page needs no password store of its own, and one changed or removed in
// the server's configuration takes effect within CacheFor.
type NATSAuth struct {
	// URLs are the servers, as --nats-url lists them (credentials in them
	// are dropped: the page's are used).
	URLs string
	// Options are the other connection options the service uses (TLS).
	Options []nats.Option
	// ListSubject is the operator-only endpoint asked (its tenant's
	// session list); InfoSubject the JetStream API request only the
	// service's account answers.
	ListSubject, InfoSubject string
	// CacheFor keeps an operator's sign-in that long (default 30 s):
	// every page load does not open a connection.
	CacheFor time.Duration
	// Timeout bounds one check (default 5 s).
	Timeout time.Duration

	mu     sync.Mutex
	passed map[[32]byte]time.Time
	slots  chan struct{}
}

// maxChecks bounds the checks under way at once: a flood of sign-ins
// opens no more connections than this.
const maxChecks = 4

// Authenticate implements Authenticator.
func (a *NATSAuth) Authenticate(ctx context.Context, user, password string) error {
	if user == "" {
		return fmt.Errorf("%w: a user is required", ErrUnauthenticated)
	}
	key := sha256.Sum256([]byte(user + "\x00" + password))
	a.mu.Lock()
	if a.passed == nil {
		a.passed = map[[32]byte]time.Time{}
		a.slots = make(chan struct{}, maxChecks)
	}
	until, ok := a.passed[key]
	a.mu.Unlock()
	if ok && time.Now().Before(until) {
		return nil
	}
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := a.check(ctx, user, password); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	for k, t := range a.passed {
		if now.After(t) {
			delete(a.passed, k)
		}
	}
	a.passed[key] = now.Add(cmpOr(a.CacheFor, 30*time.Second))
	return nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// check connects as user and asks what only an operator may.
func (a *NATSAuth) check(ctx context.Context, user, password string) error {
	ctx, cancel := context.WithTimeout(ctx, cmpOr(a.Timeout, 5*time.Second))
	defer cancel()
	// A permission violation comes back asynchronously, not as the
	// request's answer: it ends the check at once.
	denied := make(chan string, 4)
	opts := append([]nats.Option{}, a.Options...)
	opts = append(opts, nats.UserInfo(user, password), nats.Name("compactor inspector sign-in"), nats.NoReconnect(),
		nats.Timeout(cmpOr(a.Timeout, 5*time.Second)), nats.NoCallbacksAfterClientClose(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) || strings.Contains(err.Error(), "Permissions Violation") {
				select {
				case denied <- err.Error():
				default:
				}
			}
		}))
	nc, err := nats.Connect(withoutCredentials(a.URLs), opts...)
	if err != nil {
		if errors.Is(err, nats.ErrAuthorization) || strings.Contains(strings.ToLower(err.Error()), "authorization") {
			return fmt.Errorf("%w: the NATS server refused user %q", ErrUnauthenticated, user)
		}
		return fmt.Errorf("connect to NATS to check user %q: %w", user, err)
	}
	defer nc.Close()
	ask := func(subject string, body []byte) (*nats.Msg, error) {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			select {
			case <-denied:
				stop()
			case <-rctx.Done():
			}
		}()
		m, err := nc.RequestWithContext(rctx, subject, body)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			return nil, fmt.Errorf("%w: user %q may not publish to %s", ErrNotOperator, user, subject)
		}
		return m, err
	}
	m, err := ask(a.InfoSubject, nil)
	switch {
	case errors.Is(err, ErrNotOperator):
		return err
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w: user %q is not in the service's account", ErrNotOperator, user)
	case err != nil:
		return fmt.Errorf("check user %q: %s: %w", user, a.InfoSubject, err)
	case strings.Contains(string(m.Data), `"error"`):
		return fmt.Errorf("%w: user %q is not in the service's account", ErrNotOperator, user)
	}
	m, err = ask(a.ListSubject, []byte(`{"limit":1}`))
	switch {
	case errors.Is(err, ErrNotOperator):
		return err
	case err != nil:
		return fmt.Errorf("check user %q: %s: %w", user, a.ListSubject, err)
	case m.Header.Get(contract.HeaderErrorCode) != "":
		return fmt.Errorf("%w: user %q: %s answered %s %s", ErrNotOperator, user, a.ListSubject,
			m.Header.Get(contract.HeaderErrorCode), m.Header.Get(contract.HeaderError))
	}
	return nil
}

// withoutCredentials drops the user information from each URL of a
// comma-separated list.
func withoutCredentials(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		if u, err := url.Parse(p); err == nil && u.User != nil {
			u.User = nil
			p = u.String()
		}
		parts[i] = p
	}
	return strings.Join(parts, ",")
}
