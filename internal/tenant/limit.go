package tenant

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Limits are a tenant's quotas (0: no bound). The request rate is
// answered by each replica; the others span the deployment (package quota).
type Limits struct {
	// RequestsPerSecond bounds the compaction requests a tenant makes
	// (request events and compactor.compact), with bursts of up to
	// RequestsBurst (default: one second's worth, at least 1); 0: no
	// bound. Each replica counts the requests it takes against its share
	// (Limiter.SetShare: the rate and burst over the replicas running,
	// which take requests in turn through their queue groups).
	RequestsPerSecond float64 `json:"requests_per_second,omitempty"`
	RequestsBurst     int     `json:"requests_burst,omitempty"`
	// Sessions bounds the sessions a tenant stores; BytesStored what their
	// messages say (session.TextBytes). A create or append over either is
	// refused whole.
	Sessions    int   `json:"sessions,omitempty"`
	BytesStored int64 `json:"bytes_stored,omitempty"`
	// ConcurrentCompactions bounds a tenant's compaction requests stored
	// and not yet answered (waiting or running) plus its compactor.compact
	// calls running: a request over it is refused, not queued.
	ConcurrentCompactions int `json:"concurrent_compactions,omitempty"`
	// ModelCallsPerHour and SummaryTokensPerHour bound a tenant's summary
	// model calls and their tokens (input and output) in each clock hour
	// (UTC), preparations included.
	ModelCallsPerHour    int   `json:"model_calls_per_hour,omitempty"`
	SummaryTokensPerHour int64 `json:"summary_tokens_per_hour,omitempty"`
	// WritesPerSecond bounds a tenant's session writes (creates, appends
	// and upload parts through the endpoints), with bursts of up to
	// WritesBurst (default: one second's worth, at least 1); shared by the
	// replicas as the request rate is. ConcurrentWrites bounds those
	// running at once in the deployment (each replica its share, at least
	// one). Both are answered before anything is read or stored.
	WritesPerSecond  float64 `json:"writes_per_second,omitempty"`
	WritesBurst      int     `json:"writes_burst,omitempty"`
	ConcurrentWrites int     `json:"concurrent_writes,omitempty"`
}

// Quota names, as the config and a QuotaError name them.
const (
	QuotaRequestsPerSecond     = "requests_per_second"
	QuotaSessions              = "sessions"
	QuotaBytesStored           = "bytes_stored"
	QuotaConcurrentCompactions = "concurrent_compactions"
	QuotaModelCallsPerHour     = "model_calls_per_hour"
	QuotaSummaryTokensPerHour  = "summary_tokens_per_hour"
	QuotaWritesPerSecond       = "writes_per_second"
	QuotaConcurrentWrites      = "concurrent_writes"
)

// Check says which limit is negative, if one is.
func (l Limits) Check() error {
	switch {
	case l.RequestsPerSecond < 0, l.RequestsBurst < 0, l.Sessions < 0, l.BytesStored < 0, l.ConcurrentCompactions < 0,
		l.ModelCallsPerHour < 0, l.SummaryTokensPerHour < 0, l.WritesPerSecond < 0, l.WritesBurst < 0, l.ConcurrentWrites < 0:
		return fmt.Errorf("requests_per_second, requests_burst, sessions, bytes_stored, concurrent_compactions, model_calls_per_hour, summary_tokens_per_hour, writes_per_second, writes_burst and concurrent_writes must be >= 0")
	}
	return nil
}

// QuotaError is a request over one of its tenant's quotas.
type QuotaError struct {
	Tenant string
	Quota  string // the quota's name in the config, e.g. requests_per_second
	Limit  float64
	// RetryAfter is when the quota has room again; 0 for a quota of what
	// is stored (sessions, bytes_stored), which has room once sessions are
	// deleted or expire.
	RetryAfter time.Duration
}

func (e *QuotaError) Error() string {
	if e.RetryAfter <= 0 {
		return fmt.Sprintf("quota_exceeded: tenant %s is over its %s quota (%g): it has room once sessions are deleted or expire", e.Tenant, e.Quota, e.Limit)
	}
	return fmt.Sprintf("quota_exceeded: tenant %s is over its %s quota (%g): retry after %s", e.Tenant, e.Quota, e.Limit, e.RetryAfter.Round(time.Millisecond))
}

// Limiter answers each tenant's quota of one rate (requests, or writes):
// a token bucket per tenant. It is safe for concurrent use; Set replaces
// the limits (the buckets of tenants whose limit did not change keep their
// tokens).
type Limiter struct {
	mu      sync.Mutex
	limits  map[string]Limits
	buckets map[string]*bucket
	share   int // the replicas the rates are shared by
	// rate is the quota a tenant's limits give (per second, burst) and
	// quota its name.
	rate  func(Limits) (float64, int)
	quota string
}

type bucket struct {
	tokens float64
	at     time.Time
	limit  Limits
}

// NewLimiter returns a limiter of the request rate with no limits.
func NewLimiter() *Limiter {
	return newLimiter(QuotaRequestsPerSecond, func(l Limits) (float64, int) { return l.RequestsPerSecond, l.RequestsBurst })
}

// NewWriteLimiter returns a limiter of the session-write rate with no
// limits.
func NewWriteLimiter() *Limiter {
	return newLimiter(QuotaWritesPerSecond, func(l Limits) (float64, int) { return l.WritesPerSecond, l.WritesBurst })
}

func newLimiter(quota string, rate func(Limits) (float64, int)) *Limiter {
	return &Limiter{limits: map[string]Limits{}, buckets: map[string]*bucket{}, share: 1, rate: rate, quota: quota}
}

// SetShare has each tenant's rate and burst shared by n replicas (at
// least 1): this one allows 1/n of them.
func (l *Limiter) SetShare(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.share = max(n, 1)
}

// Share is the replicas the rates are shared by.
func (l *Limiter) Share() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.share
}

// Set replaces every tenant's limits.
func (l *Limiter) Set(limits map[string]Limits) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.limits = make(map[string]Limits, len(limits))
	for t, lim := range limits {
		l.limits[t] = lim
	}
	for t, b := range l.buckets {
		if l.limits[t] != b.limit {
			delete(l.buckets, t)
		}
	}
}

// Allow takes one request of tenant t at now, or answers the QuotaError
// that says when there is room again.
func (l *Limiter) Allow(t string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.limits[t]
	perSecond, burstOf := l.rate(lim)
	if perSecond <= 0 {
		return nil
	}
	burst := float64(burstOf)
	if burst <= 0 {
		burst = math.Max(1, math.Ceil(perSecond))
	}
	rate := perSecond / float64(l.share)
	burst = math.Max(1, burst/float64(l.share))
	b := l.buckets[t]
	if b == nil {
		b = &bucket{tokens: burst, at: now, limit: lim}
		l.buckets[t] = b
	}
	b.tokens = math.Min(burst, b.tokens+now.Sub(b.at).Seconds()*rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return nil
	}
	wait := time.Duration((1 - b.tokens) / rate * float64(time.Second))
	return &QuotaError{Tenant: t, Quota: l.quota, Limit: perSecond, RetryAfter: wait}
}
