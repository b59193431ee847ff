package quota

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// shared is a deployment's shared usage in memory (the JetStream one is
// kvstore's, tested through the service).
type shared struct {
	mu    sync.Mutex
	usage Usage
	hours map[string]Hour
	scans int
}

func (s *shared) Usage(context.Context, time.Duration) (Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scans++
	return s.usage, nil
}

func (s *shared) AddHour(_ context.Context, t string, hour time.Time, calls, tokens int64) (Hour, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hours[t]
	if !h.Hour.Equal(hour) {
		h = Hour{Hour: hour}
	}
	h.Calls, h.Tokens = max(h.Calls+calls, 0), max(h.Tokens+tokens, 0)
	s.hours[t] = h
	return h, nil
}

func quotaOf(err error) string {
	var q *tenant.QuotaError
	if errors.As(err, &q) {
		return q.Quota
	}
	return ""
}

// Sessions and bytes: the last scan plus this replica's writes since;
// writes the next scan counts are dropped from the deltas, not counted
// twice; another tenant's use is not counted.
func TestStoredQuotas(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	sh := &shared{hours: map[string]Hour{}, usage: Usage{At: now, Tenants: map[string]session.TenantUsage{"A": {Tenant: "A", Sessions: 1, Bytes: 100}}}}
	q := New(sh, nil, Options{Now: func() time.Time { return now }})
	q.Set(map[string]tenant.Limits{"A": {Sessions: 2, BytesStored: 300}})
	a, b := tenant.With(context.Background(), "A"), tenant.With(context.Background(), "B")
	if err := q.Write(a, true, 50); err != nil {
		t.Fatalf("a second session: %v", err)
	}
	now = now.Add(time.Second)
	q.Wrote(a, 1, 50)
	if err := q.Write(a, true, 1); quotaOf(err) != tenant.QuotaSessions {
		t.Fatalf("a third session: %v", err)
	}
	if err := q.Write(a, false, 151); quotaOf(err) != tenant.QuotaBytesStored {
		t.Fatalf("an append over the bytes: %v", err)
	}
	if err := q.Write(a, false, 150); err != nil {
		t.Fatalf("an append to the byte: %v", err)
	}
	if err := q.Write(b, true, 1<<30); err != nil {
		t.Fatalf("tenant B: %v", err)
	}
	// A new scan counts the write: it is not counted twice.
	sh.mu.Lock()
	sh.usage = Usage{At: now.Add(time.Millisecond), Tenants: map[string]session.TenantUsage{"A": {Tenant: "A", Sessions: 2, Bytes: 150}}}
	sh.mu.Unlock()
	now = now.Add(time.Hour)
	if err := q.Write(a, false, 150); err != nil {
		t.Fatalf("after a scan: %v", err)
	}
	if err := q.Write(a, false, 151); quotaOf(err) != tenant.QuotaBytesStored {
		t.Fatalf("after a scan, over: %v", err)
	}
	// A raised limit applies at once.
	q.Set(map[string]tenant.Limits{"A": {Sessions: 3}})
	if err := q.Write(a, true, 1<<20); err != nil {
		t.Fatalf("after a raised limit: %v", err)
	}
}

// Model calls: a call is reserved before it is made and handed back when
// the hour has no room; a request is refused once the hour is spent, with
// the time left in the hour; a new hour starts from zero.
func TestHourlyQuotas(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 40, 0, 0, time.UTC)
	sh := &shared{hours: map[string]Hour{}}
	q := New(sh, nil, Options{Now: func() time.Time { return now }})
	q.Set(map[string]tenant.Limits{"A": {ModelCallsPerHour: 2, SummaryTokensPerHour: 1000}})
	a := tenant.With(context.Background(), "A")
	for i := range 2 {
		if err := q.Request(context.Background(), "A"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if err := q.Take(a); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		q.Used(a, 100)
	}
	err := q.Take(a)
	var qe *tenant.QuotaError
	if !errors.As(err, &qe) || qe.Quota != tenant.QuotaModelCallsPerHour || qe.RetryAfter != 20*time.Minute {
		t.Fatalf("a third call: %v", err)
	}
	if h := sh.hours["A"]; h.Calls != 2 || h.Tokens != 200 {
		t.Fatalf("the refused call was kept: %+v", h)
	}
	if quotaOf(q.Request(context.Background(), "A")) != tenant.QuotaModelCallsPerHour {
		t.Fatal("a request with no call left was admitted")
	}
	q.Set(map[string]tenant.Limits{"A": {SummaryTokensPerHour: 1000}})
	q.Used(a, 800)
	if quotaOf(q.Request(context.Background(), "A")) != tenant.QuotaSummaryTokensPerHour || quotaOf(q.Take(a)) != tenant.QuotaSummaryTokensPerHour {
		t.Fatal("the hour's tokens are spent, and a request or a call was admitted")
	}
	now = now.Add(20 * time.Minute) // the next hour
	if err := q.Request(context.Background(), "A"); err != nil {
		t.Fatalf("the next hour: %v", err)
	}
	if err := q.Take(a); err != nil {
		t.Fatalf("a call in the next hour: %v", err)
	}
}

// Concurrent compactions: the tenant's stored requests and its
// compactor.compact calls running; a call ended frees its place.
func TestConcurrentCompactions(t *testing.T) {
	backlog := 1
	q := New(&shared{hours: map[string]Hour{}}, func(context.Context, string) (int, error) { return backlog, nil }, Options{})
	q.Set(map[string]tenant.Limits{"A": {ConcurrentCompactions: 2}})
	ctx := context.Background()
	done, err := q.Compact(ctx, "A")
	if err != nil {
		t.Fatalf("a call beside one stored request: %v", err)
	}
	if quotaOf(q.Request(ctx, "A")) != tenant.QuotaConcurrentCompactions {
		t.Fatal("a request beyond a stored one and a running call")
	}
	if _, err := q.Compact(ctx, "A"); quotaOf(err) != tenant.QuotaConcurrentCompactions {
		t.Fatalf("a second call: %v", err)
	}
	done()
	done() // once only
	if err := q.Request(ctx, "A"); err != nil {
		t.Fatalf("after the call ended: %v", err)
	}
	if q.Bounded("A") != 2 || q.Bounded("B") != 0 {
		t.Fatal("Bounded")
	}
	backlog = 5
	if err := q.Request(ctx, "B"); err != nil {
		t.Fatalf("tenant B has no quota: %v", err)
	}
}

// concurrent_writes: a tenant's session writes running at once in this
// replica, at most its share; one ends, another may start. Another tenant
// is not counted against it.
func TestConcurrentWrites(t *testing.T) {
	q := New(&shared{hours: map[string]Hour{}}, nil, Options{})
	q.Set(map[string]tenant.Limits{"A": {ConcurrentWrites: 2}})
	r1, err := q.Writes("A")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Writes("A"); err != nil {
		t.Fatal(err)
	}
	var qe *tenant.QuotaError
	if _, err := q.Writes("A"); !errors.As(err, &qe) || qe.Quota != tenant.QuotaConcurrentWrites || qe.RetryAfter <= 0 {
		t.Fatalf("A's third write at once: %v", err)
	}
	if _, err := q.Writes("B"); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	r1()
	if _, err := q.Writes("A"); err != nil {
		t.Fatalf("A's write once one ended: %v", err)
	}
}

// registry is shared usage with replicas: each heartbeat carries what
// its replica wrote since the scan.
type registry struct {
	*shared
	beats *beats
	me    string
}

type beats struct {
	mu sync.Mutex
	by map[string]Shared
}

func (r *registry) Replicas(_ context.Context, _ time.Duration, mine Shared) (int, []Shared, error) {
	r.beats.mu.Lock()
	defer r.beats.mu.Unlock()
	r.beats.by[r.me] = mine
	var others []Shared
	for id, s := range r.beats.by {
		if id != r.me {
			others = append(others, s)
		}
	}
	return len(r.beats.by), others, nil
}

func (r *registry) Leave(context.Context) error { return nil }

// Issue 42: a tenant passed its sessions quota by 48 % under a flood spread
// over two replicas, each counting the last scan and its own writes only.
// Each now counts the other's writes since the same scan too, shared in
// its heartbeat every second.
func TestReplicasShareTheirWrites(t *testing.T) {
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sh := &shared{hours: map[string]Hour{}, usage: Usage{At: now, Tenants: map[string]session.TenantUsage{"A": {Tenant: "A", Sessions: 2}}}}
	bs := &beats{by: map[string]Shared{}}
	r1, r2 := &registry{shared: sh, beats: bs, me: "r1"}, &registry{shared: sh, beats: bs, me: "r2"}
	q1 := New(r1, nil, Options{Now: clock})
	q2 := New(r2, nil, Options{Now: clock})
	for _, q := range []*Quotas{q1, q2} {
		q.Set(map[string]tenant.Limits{"A": {Sessions: 6}})
	}
	a := tenant.With(context.Background(), "A")
	// Replica 1 takes three new sessions, replica 2 one.
	for range 3 {
		if err := q1.Write(a, true, 0); err != nil {
			t.Fatal(err)
		}
		q1.Wrote(a, 1, 0)
	}
	if err := q2.Write(a, true, 0); err != nil {
		t.Fatal(err)
	}
	q2.Wrote(a, 1, 0)
	// One round of heartbeats: each counts the other's.
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run does one round, then stops
	q1.Run(ctx)
	q2.Run(ctx)
	q1.Run(ctx)
	if err := q2.Write(a, true, 0); quotaOf(err) != tenant.QuotaSessions {
		t.Fatalf("replica 2, with 2 scanned and 4 written across both (quota 6): %v", err)
	}
	if err := q1.Write(a, true, 0); quotaOf(err) != tenant.QuotaSessions {
		t.Fatalf("replica 1 likewise: %v", err)
	}
}

// A replica that has read a newer scan than the other counts the other's
// writes made since its scan started: before, it counted them only once
// both held the same scan, and a tenant writing through two replicas
// passed its sessions quota by 15 % (make chaos --noisy).
func TestReplicasOnDifferentScansShareTheirWrites(t *testing.T) {
	start := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { return now }
	sh := &shared{hours: map[string]Hour{}, usage: Usage{At: start, Tenants: map[string]session.TenantUsage{"A": {Tenant: "A", Sessions: 2}}}}
	bs := &beats{by: map[string]Shared{}}
	r1, r2 := &registry{shared: sh, beats: bs, me: "r1"}, &registry{shared: sh, beats: bs, me: "r2"}
	q1 := New(r1, nil, Options{Now: clock})
	q2 := New(r2, nil, Options{Now: clock})
	for _, q := range []*Quotas{q1, q2} {
		q.Set(map[string]tenant.Limits{"A": {Sessions: 6}})
	}
	a := tenant.With(context.Background(), "A")
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run does one round, then stops
	q1.Run(ctx)
	q2.Run(ctx) // both hold the scan of 9:00:00
	// A new scan at 9:00:10 counts 3 sessions; replica 1 reads it, replica
	// 2 not yet. Then replica 2 writes two sessions.
	now = start.Add(10 * time.Second)
	sh.mu.Lock()
	sh.usage = Usage{At: now, Tenants: map[string]session.TenantUsage{"A": {Tenant: "A", Sessions: 3}}}
	sh.mu.Unlock()
	if _, err := q1.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	now = now.Add(500 * time.Millisecond)
	for range 2 {
		if err := q2.Write(a, true, 0); err != nil {
			t.Fatal(err)
		}
		q2.Wrote(a, 1, 0)
	}
	q2.Run(ctx) // shares its writes (it then reads the newer scan too)
	q1.Run(ctx)
	// Replica 1: 3 scanned and 2 written by replica 2 since: one more.
	if err := q1.Write(a, true, 0); err != nil {
		t.Fatalf("replica 1 at 5 of 6: %v", err)
	}
	q1.Wrote(a, 1, 0)
	if err := q1.Write(a, true, 0); quotaOf(err) != tenant.QuotaSessions {
		t.Fatalf("replica 1 with 3 scanned and 3 written across both since (quota 6): %v", err)
	}
}
