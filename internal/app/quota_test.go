package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/wire"
)

// quotaChat is a chat of turns exchanges whose user turns carry mark.
func quotaChat(mark string, turns int) []client.Message {
	msgs := []client.Message{client.Text("", client.System, "You are a support agent.")}
	for i := range turns {
		msgs = append(msgs, client.Text("", client.User, fmt.Sprintf("%s question %d: where is my bag BAG-%04d with my laptop in it?", mark, i, i)),
			client.Text("", client.Assistant, fmt.Sprintf("bag BAG-%04d is in Lisbon and arrives on day %d by courier", i, i%28+1)))
	}
	return msgs
}

func textBytes(msgs []client.Message) int64 {
	var n int64
	stored := wire.Must[[]session.Message](msgs)
	for i := range stored {
		n += int64(session.TextBytes(&stored[i]))
	}
	return n
}

// overQuota reports whether err is a quota_exceeded refusal of quota: an
// endpoint's says so in the Go client's Error, a request's in its failure.
func overQuota(err error, quota string) bool {
	if ce := (*client.Error)(nil); errors.As(err, &ce) {
		return ce.Quota == quota && ce.Code == 429 && errors.Is(err, client.ErrQuotaExceeded)
	}
	return err != nil && strings.Contains(err.Error(), "quota_exceeded") && strings.Contains(err.Error(), quota)
}

// Each of a tenant's quotas, on a real server with the tenants on their
// own accounts: over it, a create, append, request event or
// compactor.compact call is refused with quota_exceeded naming the quota
// (and, for a quota of time, when it has room again); nothing of it is
// stored; the other tenant is not counted against it; a quota changed
// applies at once.
func TestTenantOverEachQuota(t *testing.T) {
	srv := accountsServer(t)
	// The summary model holds tenant A's calls while hold is set.
	var hold atomic.Bool
	release := make(chan struct{})
	svc, _ := service(t, userURL(srv, "compactor", "compactor-secret"), func(prompt string) fakeprovider.Action {
		if hold.Load() && strings.Contains(prompt, "MARK-A") {
			<-release
		}
		return fakeprovider.Action{}
	}, func(c *app.Config) { c.UsageEvery = 100 * time.Millisecond })
	ctx := context.Background()
	_, a := tenantClient(t, srv, "tenant-a", "a-secret")
	_, b := tenantClient(t, srv, "tenant-b", "b-secret")
	ncA, err := nats.Connect(userURL(srv, "tenant-a", "a-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer ncA.Close()
	head := func(sid string) int64 {
		t.Helper()
		h, err := a.History(ctx, sid)
		if err != nil {
			t.Fatalf("history of A's %s: %v", sid, err)
		}
		return h.Record.HeadSeq
	}

	// sessions and bytes_stored.
	chat := quotaChat("MARK-A", 30)
	small := []client.Message{client.Text("", client.User, "MARK-A hello")}
	svc.SetTenants(nil, map[string]tenant.Limits{"TENANT_A": {Sessions: 2, BytesStored: textBytes(chat) + textBytes(small) + 200}})
	for _, sid := range []string{"s1", "s2"} {
		msgs := chat
		if sid == "s2" {
			msgs = small
		}
		if _, err := a.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: 500, Messages: msgs}); err != nil {
			t.Fatalf("A's create of %s: %v", sid, err)
		}
	}
	if _, err := a.Create(ctx, "s3", client.NewSession{Model: "gpt-4o", Messages: small}); !overQuota(err, "sessions") {
		t.Fatalf("A's third session: %v, want quota_exceeded sessions", err)
	}
	var eb contract.ErrorBody
	if code := call(t, ncA, contract.SubjectCreate, map[string]any{"session_id": "s3", "messages": []map[string]any{{"role": "user", "content": "hi"}}}, &eb); code != "429" ||
		eb.Quota != tenant.QuotaSessions || eb.Status != contract.StatusNotApplied || eb.RetryAfterMS != 0 {
		t.Fatalf("A's third session by the endpoint: %s %+v, want 429 sessions not_applied", code, eb)
	}
	if _, err := a.History(ctx, "s3"); err == nil {
		t.Fatal("the refused session was stored")
	}
	if _, err := a.Create(ctx, "s1", client.NewSession{Model: "gpt-4o", ContextLimit: 500, Messages: chat}); err != nil {
		t.Fatalf("A's repeated create at its sessions quota: %v (a repeat is no new session)", err)
	}
	big := []client.Message{client.Text("", client.User, "MARK-A "+strings.Repeat("x", 400))}
	before := head("s1")
	if _, err := a.Append(ctx, "s1", big); !overQuota(err, "bytes_stored") {
		t.Fatalf("A's append over its bytes: %v, want quota_exceeded bytes_stored", err)
	}
	if got := head("s1"); got != before {
		t.Fatalf("the refused append moved the head %d -> %d", before, got)
	}
	if _, err := a.Append(ctx, "s1", []client.Message{client.Text("", client.User, "MARK-A ok?")}); err != nil {
		t.Fatalf("A's append within its bytes: %v", err)
	}
	// The usage scan counts each tenant's sessions and bytes (metrics).
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		rec := httptest.NewRecorder()
		svc.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		for _, want := range []string{`compactor_tenant_sessions{tenant="TENANT_A"} 2`, `compactor_tenant_bytes_stored{tenant="TENANT_A"}`, "compactor_tenant_usage_scanned_timestamp_seconds"} {
			if !strings.Contains(rec.Body.String(), want) {
				return fmt.Errorf("metrics lack %s", want)
			}
		}
		return nil
	})
	for i := range 3 { // B is not counted against A
		if _, err := b.Create(ctx, fmt.Sprintf("s%d", i+1), client.NewSession{Model: "gpt-4o", ContextLimit: 500, Messages: quotaChat("MARK-B", 30)}); err != nil {
			t.Fatalf("B's create %d: %v", i, err)
		}
	}

	// concurrent_compactions: A's first request is held at the model; a
	// second is refused (by event and by the endpoint) until it is
	// answered, while B's go on.
	// (A's model use is counted while it has a quota of it.)
	svc.SetTenants(nil, map[string]tenant.Limits{"TENANT_A": {ConcurrentCompactions: 1, ModelCallsPerHour: 1000}})
	req := func(id string) client.CompactRequest {
		return client.CompactRequest{RequestID: id, Model: "gpt-4o"}
	}
	hold.Store(true)
	first := make(chan error, 1)
	go func() {
		_, err := a.Compact(ctx, "s1", req("a-1"))
		first <- err
	}()
	backlog := consumer.Backlog(svc.JS)
	natstest.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error { // A's first request stored
		if n, err := backlog(ctx, "TENANT_A"); err != nil || n != 1 {
			return fmt.Errorf("A's requests stored: %d (%v), want 1", n, err)
		}
		return nil
	})
	_, err2 := a.Compact(ctx, "s2", req("a-2"))
	if !overQuota(err2, "concurrent_compactions") || !strings.Contains(err2.Error(), "retry after") {
		t.Fatalf("A's second request while one runs: %v, want quota_exceeded concurrent_compactions", err2)
	}
	var body contract.ErrorBody
	if code := call(t, ncA, contract.SubjectCompact, map[string]any{"session_id": "s2", "request_id": "a-3"}, &body); code != "429" || body.Quota != tenant.QuotaConcurrentCompactions || body.RetryAfterMS <= 0 {
		t.Fatalf("A's compactor.compact while one runs: %s %+v", code, body)
	}
	if res, err := b.CompactSync(ctx, "s1", req("b-1")); err != nil {
		t.Fatalf("B's request while A's runs: %+v %v", res, err)
	}
	hold.Store(false)
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("A's first request: %v", err)
	}
	if h, err := a.History(ctx, "s2"); err != nil || len(h.Compactions) != 0 {
		t.Fatalf("A's refused requests compacted s2: %d compactions (%v)", len(h.Compactions), err)
	}

	// model_calls_per_hour and summary_tokens_per_hour: at what A has
	// used this hour, its next request is refused until the hour is over.
	_, hour, err := svc.Quotas.Tenant(ctx, "TENANT_A")
	if err != nil || hour.Calls == 0 || hour.Tokens == 0 {
		t.Fatalf("A's model use this hour: %+v %v", hour, err)
	}
	untilHour := time.Until(hour.Hour.Add(time.Hour))
	for _, lim := range []tenant.Limits{{ModelCallsPerHour: int(hour.Calls)}, {SummaryTokensPerHour: hour.Tokens}} {
		svc.SetTenants(nil, map[string]tenant.Limits{"TENANT_A": lim})
		quota := tenant.QuotaModelCallsPerHour
		if lim.SummaryTokensPerHour > 0 {
			quota = tenant.QuotaSummaryTokensPerHour
		}
		if _, err := a.Compact(ctx, "s2", req("a-4")); !overQuota(err, quota) {
			t.Fatalf("A's request at its %s: %v", quota, err)
		}
		body = contract.ErrorBody{}
		if code := call(t, ncA, contract.SubjectCompact, map[string]any{"session_id": "s2", "request_id": "a-5"}, &body); code != "429" || body.Quota != quota ||
			body.RetryAfterMS <= 0 || time.Duration(body.RetryAfterMS)*time.Millisecond > untilHour+time.Second {
			t.Fatalf("A's compactor.compact at its %s: %s %+v (the hour ends in %s)", quota, code, body, untilHour)
		}
	}
	if res, err := b.CompactSync(ctx, "s2", req("b-2")); err != nil {
		t.Fatalf("B's request: %+v %v", res, err)
	}
	svc.SetTenants(nil, nil)
	if res, err := a.CompactSync(ctx, "s2", req("a-6")); err != nil {
		t.Fatalf("A's request with its quotas lifted: %+v %v", res, err)
	}

	// writes_per_second (issue 42: a tenant's append flood slowed the
	// others'): a burst of two, then the third write is refused at once,
	// saying when there is room, and nothing is stored; B writes on.
	svc.SetTenants(nil, map[string]tenant.Limits{"TENANT_A": {WritesPerSecond: 0.5, WritesBurst: 2}})
	before = head("s2")
	for i := range 2 {
		if _, err := a.Append(ctx, "s2", []client.Message{client.Text(fmt.Sprint("w", i), client.User, "MARK-A a write")}); err != nil {
			t.Fatalf("A's write %d within its burst: %v", i, err)
		}
	}
	body = contract.ErrorBody{}
	if code := call(t, ncA, contract.SubjectAppend, map[string]any{"session_id": "s2", "messages": []map[string]any{{"id": "w2", "role": "user", "content": "one too many"}}}, &body); code != "429" ||
		body.Quota != tenant.QuotaWritesPerSecond || body.Status != contract.StatusRetry || body.RetryAfterMS <= 0 {
		t.Fatalf("A's third write: %s %+v, want 429 writes_per_second retry", code, body)
	}
	var ce *client.Error
	if _, err := a.Append(ctx, "s2", []client.Message{client.Text("w2", client.User, "one too many")}); !errors.As(err, &ce) ||
		!overQuota(err, tenant.QuotaWritesPerSecond) || ce.RetryAfter <= 0 || !ce.Retryable() {
		t.Fatalf("the Go client's write over the rate: %v (%+v), want an Error naming writes_per_second with a RetryAfter", err, ce)
	}
	if got := head("s2"); got != before+2 {
		t.Fatalf("A's head %d after two writes and a refused one, want %d", got, before+2)
	}
	if _, err := b.Append(ctx, "s1", []client.Message{client.Text("", client.User, "MARK-B a write")}); err != nil {
		t.Fatalf("B's write beside A at its rate: %v", err)
	}
	svc.SetTenants(nil, nil)
}

// Two replicas share a tenant's request rate: each counts the other (a
// heartbeat in compactor_meta) and allows half of it, so a burst of two
// lets two requests in across both, whichever replica each reaches; when
// one stops, the other takes the whole rate.
func TestTwoReplicasShareARequestRate(t *testing.T) {
	srv := accountsServer(t)
	limits := map[string]tenant.Limits{"TENANT_A": {RequestsPerSecond: 0.001, RequestsBurst: 2}}
	var replicas []*app.App
	for range 2 {
		svc, _ := service(t, userURL(srv, "compactor", "compactor-secret"), nil, func(c *app.Config) {
			c.UsageEvery, c.Limits = 100*time.Millisecond, limits
		})
		replicas = append(replicas, svc)
	}
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for i, r := range replicas {
			if n := r.Quotas.Replicas(); n != 2 {
				return fmt.Errorf("replica %d counts %d replicas", i, n)
			}
		}
		return nil
	})
	ctx := context.Background()
	ncA, a := tenantClient(t, srv, "tenant-a", "a-secret")
	if _, err := a.Create(ctx, "s", client.NewSession{Model: "gpt-4o", Messages: quotaChat("MARK-A", 3)}); err != nil {
		t.Fatal(err)
	}
	in, refused := 0, 0
	for i := range 12 {
		var body contract.ErrorBody
		switch code := call(t, ncA, contract.SubjectCompact, map[string]any{"session_id": "s", "request_id": fmt.Sprintf("r-%d", i)}, &body); {
		case code == "":
			in++
		case code == "429" && body.Quota == tenant.QuotaRequestsPerSecond:
			refused++
		default:
			t.Fatalf("request %d: %s %+v", i, code, body)
		}
	}
	if in < 1 || in > 2 || refused != 12-in {
		t.Fatalf("%d requests let in, %d refused: a burst of 2 shared by two replicas lets in at most 2", in, refused)
	}
	if err := replicas[1].Stop(); err != nil {
		t.Fatal(err)
	}
	natstest.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if n := replicas[0].Quotas.Replicas(); n != 1 {
			return fmt.Errorf("the replica left counts %d replicas", n)
		}
		return nil
	})
}
