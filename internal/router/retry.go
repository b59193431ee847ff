package router

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Retry is the retry policy for one summary call: attempts with full-jitter
// exponential backoff, a Retry-After the provider sends winning over the
// computed delay, all within the request's deadline.
type Retry struct {
	// Attempts is the total number of calls, at least 1.
	Attempts int
	// Base and Max bound the backoff: attempt n waits a random time in
	// [0, min(Max, Base*2^n)).
	Base, Max time.Duration
	// MaxRetryAfter caps how long a Retry-After may make the caller wait.
	MaxRetryAfter time.Duration
	// Sleep waits or returns ctx's error; tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// DefaultRetry: 4 attempts, 500 ms doubling to 20 s, Retry-After honoured
// up to 60 s.
func DefaultRetry() Retry {
	return Retry{Attempts: 4, Base: 500 * time.Millisecond, Max: 20 * time.Second, MaxRetryAfter: 60 * time.Second, Sleep: sleep}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// delay returns the wait before retry number n (0-based) after err.
func (r Retry) delay(n int, err error) time.Duration {
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		return min(ae.RetryAfter, r.MaxRetryAfter)
	}
	ceiling := r.Max
	if shift := uint(n); shift < 30 {
		ceiling = min(r.Max, r.Base<<shift)
	}
	if ceiling <= 0 {
		return 0
	}
	return rand.N(ceiling)
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
