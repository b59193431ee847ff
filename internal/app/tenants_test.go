package app_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/tenant"
)

// accountsConf is a server with the compactor in its own account and two
// tenants, each importing the service's exports under the names a runtime
// uses; %s is the store's directory.
const accountsConf = `
listen: 127.0.0.1:-1
jetstream { store_dir: %q }
accounts {
  COMPACTOR: {
    jetstream: enabled
    users: [{user: compactor, password: compactor-secret}]
    exports: [
      {service: "tenant.*.compactor.>", account_token_position: 2}
      {stream: "tenant.*.compaction.>", account_token_position: 2}
    ]
  }
  TENANT_A: { users: [{user: tenant-a, password: a-secret}], imports: %s }
  TENANT_B: { users: [{user: tenant-b, password: b-secret}], imports: %s }
}
`

func tenantImports(name string) string {
	return fmt.Sprintf(`[
      {service: {account: COMPACTOR, subject: "tenant.%[1]s.compactor.>"}, to: "compactor.>", share: true}
      {service: {account: COMPACTOR, subject: "tenant.%[1]s.compactor.request.agent.context.>"}, to: "agent.context.>"}
      {stream: {account: COMPACTOR, subject: "tenant.%[1]s.compaction.>"}, to: "compaction.>"}
    ]`, name)
}

// accountsServer starts a nats-server on accountsConf.
func accountsServer(t *testing.T) *server.Server {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "nats.conf")
	conf := fmt.Sprintf(accountsConf, filepath.Join(dir, "js"), tenantImports("TENANT_A"), tenantImports("TENANT_B"))
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts.NoLog, opts.NoSigs = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return s
}

// tenantClient connects as a tenant's user, with the Go client on the
// connection.
func tenantClient(t *testing.T, srv *server.Server, user, pass string) (*nats.Conn, *client.Client) {
	t.Helper()
	nc, err := nats.Connect(userURL(srv, user, pass))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c, err := client.New(nc, client.WithTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return nc, c
}

// userURL is the server's URL with a user's credentials.
func userURL(s *server.Server, user, pass string) string {
	return strings.Replace(s.ClientURL(), "nats://", "nats://"+user+":"+pass+"@", 1)
}

// Two tenants, each in its own account, use the service through their
// imports with the subjects a runtime always used, and the same session
// id: each creates, appends, reads, lists, compacts (by request event
// and by the endpoint), and deletes its own session, and sees only its
// own results; another account's subjects are not there to call.
func TestTenantsOnAccountsDoNotMeet(t *testing.T) {
	srv := accountsServer(t)
	logs := &natstest.LogBuffer{}
	svc, _ := service(t, userURL(srv, "compactor", "compactor-secret"), nil, func(c *app.Config) {
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	ncA, a := tenantClient(t, srv, "tenant-a", "a-secret")
	ncB, b := tenantClient(t, srv, "tenant-b", "b-secret")
	ctx := context.Background()
	// Each tenant's results, as its runtimes subscribe to them.
	resultsOf := func(nc *nats.Conn) *nats.Subscription {
		sub, err := nc.SubscribeSync("compaction.>")
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		return sub
	}
	resA, resB := resultsOf(ncA), resultsOf(ncB)

	turns := func(tenant string, n int) []client.Message {
		out := []client.Message{client.Text("", client.System, "You are "+tenant+"'s support agent.")}
		for i := range n {
			out = append(out,
				client.Text(fmt.Sprintf("u%d", i), client.User, fmt.Sprintf("%s question %d: where is my bag tagged BAG-%04d? It held my laptop.", tenant, i, i)),
				client.Text(fmt.Sprintf("a%d", i), client.Assistant, fmt.Sprintf("%s: bag BAG-%04d is in Lisbon and arrives on day %d by courier.", tenant, i, i%28+1)))
		}
		return out
	}
	for c, tenant := range map[*client.Client]string{a: "A", b: "B"} {
		if _, err := c.Create(ctx, "same", client.NewSession{Model: "gpt-4o", ContextLimit: 1000, Messages: turns(tenant, 30)}); err != nil {
			t.Fatalf("tenant %s: create: %v", tenant, err)
		}
	}
	if _, err := a.Append(ctx, "same", []client.Message{client.Text("only-a", client.User, "only A says this")}); err != nil {
		t.Fatal(err)
	}
	// Each reads its own session.
	hA, err := a.History(ctx, "same")
	if err != nil {
		t.Fatal(err)
	}
	hB, err := b.History(ctx, "same")
	if err != nil {
		t.Fatal(err)
	}
	if len(hA.Messages) != 62 || len(hB.Messages) != 61 || !strings.Contains(hB.Messages[1].Content.Text, "B question 0") {
		t.Fatalf("A reads %d messages, B %d (%q)", len(hA.Messages), len(hB.Messages), hB.Messages[1].Content.Text)
	}
	// A compacts through its request stream; the result reaches A alone.
	res, err := a.Compact(ctx, "same", client.CompactRequest{RequestID: "req-1", Model: "gpt-4o"})
	if err != nil || res.Outcome != "compacted" {
		t.Fatalf("A's compaction: %+v %v", res, err)
	}
	m, err := resA.NextMsg(10 * time.Second)
	if err != nil || !strings.HasSuffix(m.Subject, ".same") || m.Header.Get("ce-tenant") != "TENANT_A" {
		t.Fatalf("A's result: %v %v", m, err)
	}
	// A tenant's result event is as the AsyncAPI document says.
	doc := loadAsyncAPI(t)
	if err := doc.checkMessage(t, doc.onlyMessage(t, "compactionCompleted"), m.Header, m.Data); err != nil {
		t.Fatalf("A's result against the document: %v", err)
	}
	if m, err := resB.NextMsg(500 * time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("B received %v (%v)", m, err)
	}
	if v, _ := b.Context(ctx, "same"); v.CompactionID != "" {
		t.Fatalf("A's compaction reached B's session: %s", v.CompactionID)
	}
	// B's request event of the same id is B's own, not a duplicate of
	// A's (the request stream deduplicates by Nats-Msg-Id: a tenant's are
	// its own), and so is its request through the endpoint.
	rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	res, err = b.Compact(rctx, "same", client.CompactRequest{RequestID: "req-1", Model: "gpt-4o"})
	if err != nil || res.Outcome != "compacted" {
		t.Fatalf("B's compaction: %+v %v", res, err)
	}
	res, err = a.CompactSync(ctx, "same", client.CompactRequest{RequestID: "req-2", Model: "gpt-4o"})
	if err != nil {
		t.Fatalf("A's compaction through the endpoint: %+v %v", res, err)
	}
	// Each tenant's requests are counted apart.
	rec := httptest.NewRecorder()
	svc.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`compactor_tenant_requests_total{outcome="compacted",tenant="TENANT_A"} 1`, `compactor_tenant_requests_total{outcome="compacted",tenant="TENANT_B"} 1`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Lists are each tenant's own.
	for tenant, nc := range map[string]*nats.Conn{"A": ncA, "B": ncB} {
		var page struct {
			Sessions []struct {
				SessionID string `json:"session_id"`
				Messages  int    `json:"messages"`
			} `json:"sessions"`
		}
		if code := call(t, nc, contract.SubjectList, map[string]any{}, &page); code != "" || len(page.Sessions) != 1 {
			t.Fatalf("tenant %s lists %+v (%s)", tenant, page, code)
		}
	}
	// A request event on no request subject is refused as JetStream
	// refuses a publish, naming the subject.
	bogus, err := ncB.Request("agent.context.bogus", []byte(`{}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(bogus.Data), `"code":400`) || !strings.Contains(string(bogus.Data), "agent.context.bogus") {
		t.Fatalf("a bogus request event: %s", bogus.Data)
	}
	// Another tenant's subjects are not in B's account: nobody answers.
	if _, err := ncB.Request("tenant.TENANT_A."+contract.SubjectContext, []byte(`{"session_id":"same"}`), time.Second); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("B reached A's subject: %v", err)
	}
	// A deletes its session; B's stays.
	if _, err := a.Delete(ctx, "same"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Context(ctx, "same"); err == nil {
		t.Fatal("A's session after its delete")
	}
	if v, err := b.Context(ctx, "same"); err != nil || v.CompactionID == "" {
		t.Fatalf("B's session after A's delete: %+v %v", v, err)
	}
	// The pipeline's lines name the tenant of the request.
	if l := logs.String(); !strings.Contains(l, `msg="compaction completed" session_id=same`) || !regexp.MustCompile(`msg="compaction completed" session_id=same .*tenant=TENANT_B`).MatchString(l) {
		t.Fatalf("the compactions' log lines do not name their tenant:\n%s", l)
	}
	// The delete's log line names the tenant and the calling account.
	if l := logs.String(); !strings.Contains(l, `msg="session deleted by request" tenant=TENANT_A caller_account=TENANT_A caller_user=tenant-a session_id=same`) {
		t.Fatalf("the delete's log does not name its caller:\n%s", l)
	}
}

// Over its requests_per_second quota a tenant's request is refused with
// quota_exceeded naming the quota and when to retry, by event (the
// JetStream publish through its import fails; nothing is stored, no
// result comes) and by endpoint (429); another tenant is not counted
// against it; a raised quota applies to the next request.
func TestTenantOverItsRequestQuota(t *testing.T) {
	srv := accountsServer(t)
	svc, _ := service(t, userURL(srv, "compactor", "compactor-secret"), nil, func(c *app.Config) {
		c.Limits = map[string]tenant.Limits{"TENANT_A": {RequestsPerSecond: 0.01, RequestsBurst: 1}}
	})
	ctx := context.Background()
	clients := map[string]*client.Client{}
	for _, u := range []string{"tenant-a", "tenant-b"} {
		_, c := tenantClient(t, srv, u, map[string]string{"tenant-a": "a-secret", "tenant-b": "b-secret"}[u])
		msgs := []client.Message{client.Text("", client.System, "You are a support agent.")}
		for i := range 30 {
			msgs = append(msgs, client.Text("", client.User, fmt.Sprintf("question %d: where is my bag BAG-%04d with my laptop in it?", i, i)),
				client.Text("", client.Assistant, fmt.Sprintf("bag BAG-%04d is in Lisbon and arrives on day %d by courier", i, i%28+1)))
		}
		if _, err := c.Create(ctx, "s", client.NewSession{Model: "gpt-4o", ContextLimit: 1000, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		clients[u] = c
	}
	a, b := clients["tenant-a"], clients["tenant-b"]
	req := func(id string) client.CompactRequest {
		return client.CompactRequest{RequestID: id, Model: "gpt-4o"}
	}
	if res, err := a.Compact(ctx, "s", req("a-1")); err != nil {
		t.Fatalf("A's first request: %+v %v", res, err)
	}
	rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, err := a.Compact(rctx, "s", req("a-2"))
	if err == nil || !strings.Contains(err.Error(), "quota_exceeded") || !strings.Contains(err.Error(), "requests_per_second") || !strings.Contains(err.Error(), "retry after") {
		t.Fatalf("A's second request event: %v", err)
	}
	// By the endpoint: 429, the quota named, a time to retry.
	nc, err := nats.Connect(userURL(srv, "tenant-a", "a-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var body contract.ErrorBody
	if code := call(t, nc, contract.SubjectCompact, map[string]any{"session_id": "s", "request_id": "a-3"}, &body); code != "429" || body.Quota != "requests_per_second" || body.RetryAfterMS <= 0 || body.Status != contract.StatusRetry {
		t.Fatalf("A's request through the endpoint: %s %+v", code, body)
	}
	// B is not counted against A.
	for _, id := range []string{"b-1", "b-2", "b-3"} {
		if res, err := b.CompactSync(ctx, "s", req(id)); err != nil {
			t.Fatalf("B's request %s: %+v %v", id, res, err)
		}
	}
	// Nothing of A's refused requests was stored or answered.
	hist, err := a.History(ctx, "s")
	if err != nil || len(hist.Compactions) != 1 {
		t.Fatalf("A's compactions %d (%v), want 1", len(hist.Compactions), err)
	}
	// A raised quota applies at once.
	svc.SetTenants(nil, map[string]tenant.Limits{"TENANT_A": {RequestsPerSecond: 100}})
	if res, err := a.Compact(ctx, "s", req("a-4")); err != nil {
		t.Fatalf("A's request after its quota was raised: %+v %v", res, err)
	}
}
