// Package quota answers each tenant's quotas (tenant.Limits) for a
// deployment of any number of replicas. What a replica can answer alone, it
// does (the request rate, per replica); the rest comes from what the
// deployment shares through JetStream:
//
//   - sessions and bytes_stored: the store's per-tenant usage (a scan of the
//     session records, made by one replica at a time and shared; Store.Usage),
//     plus what every replica wrote since that scan (each shares its own in
//     its heartbeat every second while a tenant has such a quota: with the
//     scan alone a tenant passed its quota by what the other replicas wrote
//     in up to 10 s, 48 % of its sessions under a flood);
//   - concurrent_compactions: the tenant's requests the request stream holds
//     (a work queue: stored and not yet answered, waiting or running), from
//     the stream itself (Backlog), plus the compactor.compact calls running
//     here;
//   - model_calls_per_hour and summary_tokens_per_hour: a counter per tenant
//     for the current clock hour (UTC), updated by compare-and-set before
//     and after each summary model call (Store.AddHour).
//
// A quota is checked before anything is stored or called: over it, the
// caller gets a *tenant.QuotaError (quota_exceeded, the quota, when it has
// room again) and nothing is done.
package quota

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// Usage is the store's per-tenant usage as of a scan that started At.
type Usage struct {
	At      time.Time                      `json:"at"`
	Tenants map[string]session.TenantUsage `json:"tenants"`
}

// Shared is what a replica wrote, per tenant, since the scan that started
// at Scan; Recent the same by the second each write was made in, so that a
// replica holding another scan counts those made since its own (without
// it, a replica that had read a newer scan ignored the other's writes
// until both held the same: a tenant passed its sessions quota by 15 %).
type Shared struct {
	Scan   time.Time                      `json:"scan"`
	Wrote  map[string]session.TenantUsage `json:"wrote,omitempty"`
	Recent map[string][]SharedWrite       `json:"recent,omitempty"`
}

// SharedWrite is what a replica wrote for a tenant within the second that
// starts at At.
type SharedWrite struct {
	At       time.Time `json:"at"`
	Sessions int       `json:"sessions,omitempty"`
	Bytes    int64     `json:"bytes,omitempty"`
}

// Hour is a tenant's summary model use in one clock hour.
type Hour struct {
	Hour   time.Time `json:"hour"` // its start (UTC)
	Calls  int64     `json:"calls"`
	Tokens int64     `json:"tokens"`
}

// Store is what the replicas of a deployment share.
type Store interface {
	// Usage returns the store's per-tenant usage from a scan at most
	// maxAge old where it can (one replica scans; the others read what it
	// wrote), else the latest there is.
	Usage(ctx context.Context, maxAge time.Duration) (Usage, error)
	// AddHour adds calls and tokens to tenant t's use of the hour that
	// starts at hour, and returns the use after; zeros read it.
	AddHour(ctx context.Context, t string, hour time.Time, calls, tokens int64) (Hour, error)
}

// Registry is a Store where the replicas of a deployment count each other
// (each writes a heartbeat): the request rate is shared by them, and so
// are their writes since the last scan.
type Registry interface {
	// Replicas writes this replica's heartbeat, carrying mine, and returns
	// how many replicas wrote one within fresh (itself included) and what
	// the others' carry.
	Replicas(ctx context.Context, fresh time.Duration, mine Shared) (int, []Shared, error)
	// Leave deletes this replica's heartbeat.
	Leave(ctx context.Context) error
}

// Backlog returns how many of tenant t's compaction requests are stored and
// not yet answered.
type Backlog func(ctx context.Context, t string) (int, error)

// Options tune Quotas.
type Options struct {
	// RefreshEvery is how often the store's usage is read again (default
	// 10 s): a replica may let a tenant past its sessions or bytes_stored
	// quota by what the other replicas wrote since.
	RefreshEvery time.Duration
	Logger       *slog.Logger
	Now          func() time.Time
}

// Quotas answers the tenants' quotas. It is safe for concurrent use.
type Quotas struct {
	store   Store
	backlog Backlog
	opt     Options
	log     *slog.Logger

	limits atomic.Pointer[map[string]tenant.Limits]
	rate   *tenant.Limiter
	writes *tenant.Limiter

	mu       sync.Mutex
	usage    Usage
	loadedAt time.Time          // when usage was read (zero: never)
	wrote    map[string][]delta // this replica's writes since usage.At
	others   []Shared           // the other replicas' writes, as their heartbeats last said
	calls    map[string]int     // compactor.compact calls running here
	writing  map[string]int     // session writes running here
}

// delta is what one write added to a tenant's usage.
type delta struct {
	at       time.Time
	sessions int
	bytes    int64
}

// New returns quotas with no limits, sharing usage through store and
// counting backlogs with backlog.
func New(store Store, backlog Backlog, opt Options) *Quotas {
	if opt.RefreshEvery <= 0 {
		opt.RefreshEvery = 10 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := &Quotas{store: store, backlog: backlog, opt: opt, log: log, rate: tenant.NewLimiter(), writes: tenant.NewWriteLimiter(),
		wrote: map[string][]delta{}, calls: map[string]int{}, writing: map[string]int{}}
	q.Set(nil)
	return q
}

// Set replaces every tenant's limits (the config's, again on SIGHUP).
func (q *Quotas) Set(limits map[string]tenant.Limits) {
	m := make(map[string]tenant.Limits, len(limits))
	for t, l := range limits {
		m[t] = l
	}
	q.limits.Store(&m)
	q.rate.Set(m)
	q.writes.Set(m)
}

// retryBusy is when a tenant at its concurrent writes may try again.
const retryBusy = 50 * time.Millisecond

// Writes admits one session write of tenant t (a create, an append, an
// upload part), before anything is read or stored: its writes_per_second
// (this replica's share, no I/O), then its concurrent_writes (this
// replica's share, at least one). release ends the write.
func (q *Quotas) Writes(t string) (release func(), err error) {
	if err := q.writes.Allow(t, q.opt.Now()); err != nil {
		return nil, err
	}
	lim := q.Of(t).ConcurrentWrites
	if lim <= 0 {
		return func() {}, nil
	}
	share := max(1, lim/q.writes.Share())
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.writing[t] >= share {
		return nil, &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaConcurrentWrites, Limit: float64(lim), RetryAfter: retryBusy}
	}
	q.writing[t]++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.writing[t]--; q.writing[t] <= 0 {
			delete(q.writing, t)
		}
	}, nil
}

// Of returns tenant t's limits.
func (q *Quotas) Of(t string) tenant.Limits { return (*q.limits.Load())[t] }

// anyStored reports whether some tenant has a quota of what is stored.
func (q *Quotas) anyStored() bool {
	for _, l := range *q.limits.Load() {
		if l.Sessions > 0 || l.BytesStored > 0 {
			return true
		}
	}
	return false
}

// Request admits one compaction request event of tenant t, to be stored:
// its rate (Rate), then what it adds to (Queue).
func (q *Quotas) Request(ctx context.Context, t string) error {
	if err := q.Rate(t); err != nil {
		return err
	}
	return q.Queue(ctx, t)
}

// Rate takes one request of tenant t's rate (no I/O).
func (q *Quotas) Rate(t string) error { return q.rate.Allow(t, q.opt.Now()) }

// Queue answers tenant t's quotas of what one more request event adds to:
// its concurrent compactions (the one admitted included) and its hourly
// model budgets.
func (q *Quotas) Queue(ctx context.Context, t string) error { return q.queue(ctx, t, 1) }

// Compact admits a compactor.compact call of tenant t, which counts as one
// of its concurrent compactions until done is called.
func (q *Quotas) Compact(ctx context.Context, t string) (done func(), err error) {
	q.mu.Lock()
	q.calls[t]++
	q.mu.Unlock()
	var once sync.Once
	done = func() {
		once.Do(func() {
			q.mu.Lock()
			if q.calls[t]--; q.calls[t] <= 0 {
				delete(q.calls, t)
			}
			q.mu.Unlock()
		})
	}
	err = q.Rate(t)
	if err == nil {
		err = q.queue(ctx, t, 0) // counted in calls already
	}
	if err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// queue answers t's quotas of what is stored and running, for a request
// that adds more to it, and of its model use.
func (q *Quotas) queue(ctx context.Context, t string, more int) error {
	lim := q.Of(t)
	now := q.opt.Now()
	if lim.ConcurrentCompactions > 0 {
		n, err := q.backlog(ctx, t)
		if err != nil {
			return err
		}
		q.mu.Lock()
		n += q.calls[t]
		q.mu.Unlock()
		if n+more > lim.ConcurrentCompactions {
			return &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaConcurrentCompactions, Limit: float64(lim.ConcurrentCompactions), RetryAfter: time.Second}
		}
	}
	if lim.ModelCallsPerHour > 0 || lim.SummaryTokensPerHour > 0 {
		h, err := q.store.AddHour(ctx, t, hourOf(now), 0, 0)
		if err != nil {
			return err
		}
		if err := overHour(t, lim, h, now, 1); err != nil {
			return err
		}
	}
	return nil
}

// hourOf is the start of now's clock hour, in UTC.
func hourOf(now time.Time) time.Time { return now.UTC().Truncate(time.Hour) }

// overHour says whether h, with calls more calls, is over t's hourly
// budgets.
func overHour(t string, lim tenant.Limits, h Hour, now time.Time, calls int64) error {
	reset := h.Hour.Add(time.Hour).Sub(now)
	if lim.ModelCallsPerHour > 0 && h.Calls+calls > int64(lim.ModelCallsPerHour) {
		return &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaModelCallsPerHour, Limit: float64(lim.ModelCallsPerHour), RetryAfter: reset}
	}
	if lim.SummaryTokensPerHour > 0 && h.Tokens >= lim.SummaryTokensPerHour {
		return &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaSummaryTokensPerHour, Limit: float64(lim.SummaryTokensPerHour), RetryAfter: reset}
	}
	return nil
}

// Take reserves one summary model call of ctx's tenant in this hour, or
// answers the hourly quota it is over. Used then adds the call's tokens.
func (q *Quotas) Take(ctx context.Context) error {
	t := tenant.From(ctx)
	lim := q.Of(t)
	if lim.ModelCallsPerHour <= 0 && lim.SummaryTokensPerHour <= 0 {
		return nil
	}
	now := q.opt.Now()
	h, err := q.store.AddHour(ctx, t, hourOf(now), 1, 0)
	if err != nil {
		return err
	}
	if err := overHour(t, lim, h, now, 0); err != nil {
		// Not made: the reservation is handed back.
		if _, uerr := q.store.AddHour(context.WithoutCancel(ctx), t, h.Hour, -1, 0); uerr != nil {
			q.log.Warn("quota: hand back a model call", slog.String("tenant", t), slog.String("error", uerr.Error()))
		}
		return err
	}
	return nil
}

// Used adds a summary model call's tokens to ctx's tenant's hour.
func (q *Quotas) Used(ctx context.Context, tokens int) {
	t := tenant.From(ctx)
	if lim := q.Of(t); (lim.SummaryTokensPerHour <= 0 && lim.ModelCallsPerHour <= 0) || tokens <= 0 {
		return
	}
	if _, err := q.store.AddHour(context.WithoutCancel(ctx), t, hourOf(q.opt.Now()), 0, int64(tokens)); err != nil {
		q.log.Warn("quota: count summary tokens", slog.String("tenant", t), slog.String("error", err.Error()))
	}
}

// Write admits a create (newSession) or an append of bytes by ctx's
// tenant: its sessions and bytes_stored quotas.
func (q *Quotas) Write(ctx context.Context, newSession bool, bytes int64) error {
	t := tenant.From(ctx)
	lim := q.Of(t)
	if lim.Sessions <= 0 && lim.BytesStored <= 0 {
		return nil
	}
	have, err := q.stored(ctx, t)
	if err != nil {
		return err
	}
	if newSession && lim.Sessions > 0 && have.Sessions+1 > lim.Sessions {
		return &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaSessions, Limit: float64(lim.Sessions)}
	}
	if lim.BytesStored > 0 && have.Bytes+bytes > lim.BytesStored {
		return &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaBytesStored, Limit: float64(lim.BytesStored)}
	}
	return nil
}

// Wrote records what a write of ctx's tenant stored (a create: 1 session;
// a delete: -1), until the next scan counts it.
func (q *Quotas) Wrote(ctx context.Context, sessions int, bytes int64) {
	t := tenant.From(ctx)
	if sessions == 0 && bytes == 0 {
		return
	}
	q.mu.Lock()
	q.wrote[t] = append(q.wrote[t], delta{at: q.opt.Now(), sessions: sessions, bytes: bytes})
	q.mu.Unlock()
}

// current returns the usage last read, reading it when it is older than
// RefreshEvery (Run keeps it fresh; this covers a first write before it).
func (q *Quotas) current(ctx context.Context) (Usage, error) {
	q.mu.Lock()
	u, at := q.usage, q.loadedAt
	q.mu.Unlock()
	if !at.IsZero() && q.opt.Now().Sub(at) < 2*q.opt.RefreshEvery {
		return u, nil
	}
	fresh, err := q.refresh(ctx)
	if err != nil && !at.IsZero() {
		// The store is away: the last usage read still answers, rather
		// than every write failing with it.
		q.log.Warn("quota: read the store's usage (answering with an older one)", slog.String("error", err.Error()))
		return u, nil
	}
	return fresh, err
}

// refresh reads the store's usage and drops the writes it counts.
func (q *Quotas) refresh(ctx context.Context) (Usage, error) {
	u, err := q.store.Usage(ctx, q.opt.RefreshEvery)
	if err != nil {
		return Usage{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if u.At.Before(q.usage.At) {
		u = q.usage // an older scan than the one held
	}
	q.usage, q.loadedAt = u, q.opt.Now()
	for t, ds := range q.wrote {
		keep := ds[:0]
		for _, d := range ds {
			if !d.at.Before(u.At) {
				keep = append(keep, d)
			}
		}
		if len(keep) == 0 {
			delete(q.wrote, t)
		} else {
			q.wrote[t] = keep
		}
	}
	return u, nil
}

// stored is what tenant t stores as this replica sees it: the last scan
// and this replica's writes since.
func (q *Quotas) stored(ctx context.Context, t string) (session.TenantUsage, error) {
	u, err := q.current(ctx)
	if err != nil {
		return session.TenantUsage{}, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	have := u.Tenants[t]
	for _, d := range q.wrote[t] {
		have.Sessions += d.sessions
		have.Bytes += d.bytes
	}
	for _, o := range q.others {
		switch {
		case o.Recent != nil:
			// The other's writes in the seconds that end after this
			// scan started (a second astride its start counts whole:
			// counted twice rather than missed).
			for _, w := range o.Recent[t] {
				if w.At.Add(time.Second).After(u.At) {
					have.Sessions += w.Sessions
					have.Bytes += w.Bytes
				}
			}
		case o.Scan.Equal(u.At): // a replica of before: counted from the same scan
			have.Sessions += o.Wrote[t].Sessions
			have.Bytes += o.Wrote[t].Bytes
		}
	}
	return have, nil
}

// mine is what this replica wrote since the scan it holds, to share.
func (q *Quotas) mine() Shared {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := Shared{Scan: q.usage.At, Recent: map[string][]SharedWrite{}}
	for t, ds := range q.wrote {
		var u session.TenantUsage
		var recent []SharedWrite
		for _, d := range ds {
			u.Sessions += d.sessions
			u.Bytes += d.bytes
			sec := d.at.Truncate(time.Second)
			if n := len(recent); n > 0 && recent[n-1].At.Equal(sec) {
				recent[n-1].Sessions += d.sessions
				recent[n-1].Bytes += d.bytes
			} else {
				recent = append(recent, SharedWrite{At: sec, Sessions: d.sessions, Bytes: d.bytes})
			}
		}
		if u.Sessions != 0 || u.Bytes != 0 {
			if out.Wrote == nil {
				out.Wrote = map[string]session.TenantUsage{}
			}
			out.Wrote[t] = u
			out.Recent[t] = recent
		}
	}
	return out
}

// ShareEvery is how often, while a tenant has a quota of what is stored,
// each replica shares its writes since the last scan with the others.
const ShareEvery = time.Second

// Tenant returns tenant t's usage as this replica sees it: the last scan,
// this replica's writes since, and the current hour's model use.
func (q *Quotas) Tenant(ctx context.Context, t string) (session.TenantUsage, Hour, error) {
	have, err := q.stored(ctx, t)
	if err != nil {
		return session.TenantUsage{}, Hour{}, err
	}
	h, err := q.store.AddHour(ctx, t, hourOf(q.opt.Now()), 0, 0)
	return have, h, err
}

// Run keeps the store's usage fresh until ctx ends: every RefreshEvery
// while some tenant has a quota of what is stored, else every
// metricsEvery of them (for the per-tenant metrics: Usage; a scan reads
// every session's record). With a Registry for a store it also counts
// the replicas every RefreshEvery, which share the request rates, and
// leaves at the end; while a tenant has a quota of what is stored, every
// ShareEvery, sharing this replica's writes since the scan and reading the
// others'.
func (q *Quotas) Run(ctx context.Context) {
	reg, _ := q.store.(Registry)
	if reg != nil {
		defer func() {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := reg.Leave(lctx); err != nil {
				q.log.Warn("quota: leave the replicas", slog.String("error", err.Error()))
			}
		}()
	}
	tick := min(q.opt.RefreshEvery, ShareEvery)
	t := time.NewTicker(tick)
	defer t.Stop()
	var counted, refreshed time.Time
	for {
		now := q.opt.Now()
		stored := q.anyStored()
		if reg != nil && (stored || now.Sub(counted) >= q.opt.RefreshEvery) {
			counted = now
			if n, others, err := reg.Replicas(ctx, 3*q.opt.RefreshEvery, q.mine()); err != nil {
				if ctx.Err() == nil {
					q.log.Warn("quota: count the replicas", slog.String("error", err.Error()))
				}
			} else {
				q.rate.SetShare(n)
				q.writes.SetShare(n)
				q.mu.Lock()
				q.others = others
				behind := false
				for _, o := range others {
					behind = behind || o.Scan.After(q.usage.At)
				}
				q.mu.Unlock()
				if behind {
					// Another replica counts from a later scan: read it
					// now, so that the writes each shares add up.
					refreshed = time.Time{}
				}
			}
		}
		q.mu.Lock()
		due := q.loadedAt.IsZero() || now.Sub(q.loadedAt) >= metricsEvery*q.opt.RefreshEvery
		q.mu.Unlock()
		if due || stored && now.Sub(refreshed) >= q.opt.RefreshEvery {
			refreshed = now
			if _, err := q.refresh(ctx); err != nil && ctx.Err() == nil {
				q.log.Warn("quota: read the store's usage", slog.String("error", err.Error()))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Replicas is how many replicas share the request rates (as last counted).
func (q *Quotas) Replicas() int { return q.rate.Share() }

// metricsEvery: without quotas of what is stored, the usage is read every
// metricsEvery refreshes (5 minutes by default), for the metrics alone.
const metricsEvery = 30

// Usage returns the store's usage as last read (by Run: a scan at most
// metricsEvery refreshes old).
func (q *Quotas) Usage() Usage {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.usage
}

// Bounded is tenant t's concurrent_compactions quota (0: none).
func (q *Quotas) Bounded(t string) int { return q.Of(t).ConcurrentCompactions }
