package router

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors, wrapped by *APIError; test with errors.Is.
var (
	// ErrAuth is returned for a rejected or missing API key (401, 403):
	// retrying cannot help.
	ErrAuth = errors.New("authentication failed")
	// ErrRateLimited is returned for 429 and Anthropic's 529 overloaded,
	// after the retry budget.
	ErrRateLimited = errors.New("rate limited")
	// ErrServer is returned for 5xx answers and transport failures (reset
	// connections, timeouts, truncated or malformed bodies) after the retry
	// budget.
	ErrServer = errors.New("provider unavailable")
	// ErrUnreachable is an ErrServer where no connection was made at all
	// (refused, no route, the name not found): the provider is down or
	// the base URL is wrong, which its metrics tell apart (outcome
	// unreachable, not server_error).
	ErrUnreachable = fmt.Errorf("%w: unreachable", ErrServer)
	// ErrBadRequest is returned for a request the provider refuses (400,
	// 404, 422) other than a context-length error.
	ErrBadRequest = errors.New("request rejected")
	// ErrMissingKey is returned by New when a provider that needs an API key
	// has none.
	ErrMissingKey = errors.New("missing API key")
	// ErrUnknownProvider is returned by New for a provider name it does not
	// know.
	ErrUnknownProvider = errors.New("unknown provider")
)

// APIError is a classified provider failure: what the HTTP answer (or the
// transport) said, and whether a retry may succeed.
type APIError struct {
	Provider   string
	Status     int    // HTTP status; 0 for a transport failure
	Type       string // the provider's error type, e.g. "rate_limit_error"
	Code       string // the provider's error code, e.g. "rate_limit_exceeded"
	Message    string
	RetryAfter time.Duration // from Retry-After, when the provider sent one
	Attempts   int           // how many calls were made
	kind       error
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s: %v", e.Provider, e.kind)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d", e.Status)
		if e.Type != "" {
			s += " " + e.Type
		}
		if e.Code != "" && e.Code != e.Type {
			s += " " + e.Code
		}
		s += ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Attempts > 1 {
		s += fmt.Sprintf(" [after %d attempts]", e.Attempts)
	}
	return s
}

// Unwrap returns the error's class (ErrAuth, ErrRateLimited, ErrServer,
// ErrBadRequest).
func (e *APIError) Unwrap() error { return e.kind }

// Retryable reports whether a later retry of the same request may succeed;
// the pipeline reads it to mark a failure retryable.
func (e *APIError) Retryable() bool {
	return errors.Is(e.kind, ErrRateLimited) || errors.Is(e.kind, ErrServer)
}
