package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/sessions"
)

// roleConn connects as a nats.conf user and collects its async errors
// (permission violations arrive there).
type roleConn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connectAs(t *testing.T, url string) *roleConn {
	t.Helper()
	r := &roleConn{errs: make(chan error, 100)}
	nc, err := nats.Connect(url, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { r.errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r.nc = nc
	r.js, _ = jetstream.New(nc)
	return r
}

// deniedPublish checks that publishing to subject is a permission violation.
func (r *roleConn) deniedPublish(t *testing.T, subject string) {
	t.Helper()
	r.nc.Publish(subject, []byte("{}"))
	r.expectViolation(t, "Publish", subject)
}

func (r *roleConn) deniedSubscribe(t *testing.T, subject string) {
	t.Helper()
	if _, err := r.nc.SubscribeSync(subject); err != nil {
		t.Fatal(err)
	}
	r.expectViolation(t, "Subscription", subject)
}

func (r *roleConn) expectViolation(t *testing.T, kind, subject string) {
	t.Helper()
	r.nc.Flush()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-r.errs:
			if strings.Contains(err.Error(), "Permissions Violation for "+kind) && strings.Contains(err.Error(), subject) {
				return
			}
		case <-deadline:
			t.Fatalf("%s to %q was allowed", kind, subject)
		}
	}
}

// TestNATSConfRoles runs a server on the repository's nats.conf and checks
// each role: admin provisions; the compactor serves without provisioning
// rights; a runtime imports, requests and reads; an observer reads events
// and nothing else.
// natsConfServer runs a server on the repository's nats.conf and returns
// the URL of each of its users (password <user>-secret).
func natsConfServer(t *testing.T) func(user string) string {
	t.Helper()
	opts, err := server.ProcessConfigFile("../../nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	// One server: an acknowledged write must be on disk (issue 42: no
	// sync_interval synced every 2 minutes).
	if !opts.SyncAlways {
		t.Fatalf("nats.conf syncs every %v, not after every write: a power loss loses acknowledged writes", opts.SyncInterval)
	}
	opts.Port, opts.StoreDir = -1, t.TempDir()
	srv := natstest.ServerWith(t, opts)
	port := srv.Addr().(*net.TCPAddr).Port
	return func(user string) string { return fmt.Sprintf("nats://%s:%s-secret@127.0.0.1:%d", user, user, port) }
}

func TestNATSConfRoles(t *testing.T) {
	as := natsConfServer(t)

	// Without credentials nothing works.
	if _, err := nats.Connect(strings.Replace(as("admin"), "admin:admin-secret@", "", 1)); err == nil {
		t.Fatal("an anonymous client connected")
	}
	if code := cli(t, as("admin"), nil, "provision", "--shards", "3"); code != 0 {
		t.Fatal("admin could not provision")
	}

	// The compactor user may not create streams, but serves what admin made.
	comp := connectAs(t, as("compactor"))
	comp.deniedPublish(t, "$JS.API.STREAM.CREATE.EVIL")
	comp.deniedPublish(t, "$JS.API.STREAM.DELETE."+consumer.RequestStream)
	// It may answer a request it did not receive through this server (issue
	// 23, item 11): after a failover a replica answers through another
	// node, which knows nothing of the request, and allow_responses alone
	// refused the answer while the runtime waited out its timeout.
	asker := connectAs(t, as("runtime"))
	inbox, err := asker.nc.SubscribeSync("_INBOX.failover-reply")
	if err != nil {
		t.Fatal(err)
	}
	if err := asker.nc.Flush(); err != nil { // the subscription is on the server before the answer
		t.Fatal(err)
	}
	if err := comp.nc.Publish("_INBOX.failover-reply", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.NextMsg(3 * time.Second); err != nil {
		t.Fatalf("the compactor's answer to an inbox it got no request from: %v", err)
	}
	startServe(t, as("admin"), "--nats-url", as("compactor"))

	// A runtime: create, append and read its session through the
	// endpoints, compact over events; it may not touch KV.
	rt := as("runtime")
	runtime := connectAs(t, rt)
	msgs, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	create := fmt.Sprintf(`{"session_id":"r1","context_limit":6000,"messages":%s}`, msgs)
	if m, err := runtime.nc.Request(contract.SubjectCreate, []byte(create), 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error") != "" {
		t.Fatalf("runtime session.create: %v %s", err, m.Data)
	}
	if m, err := runtime.nc.Request(contract.SubjectAppend, []byte(`{"session_id":"r1","messages":[{"id":"u-late","role":"user","content":"and the baggage?"}]}`), 10*time.Second); err != nil || m.Header.Get("Nats-Service-Error") != "" {
		t.Fatalf("runtime session.append: %v %s", err, m.Data)
	}
	observer := connectAs(t, as("observer"))
	seen, err := observer.nc.SubscribeSync("compaction.completed.>")
	if err != nil {
		t.Fatal(err)
	}
	observer.nc.Flush()
	var res map[string]any
	if code := cli(t, rt, &res, "compact", "r1", "--timeout", "30s"); code != 0 || res["outcome"] != "compacted" {
		t.Fatalf("runtime compact: exit %d %v", code, res)
	}
	// A runtime using the CloudEvents SDK's own JetStream binding, with
	// only the runtime role's rights: a request in, its result out
	// through a consumer bound by compaction.>.
	sdkRequest(t, runtime.nc, "r1", "sdk-1")

	var view sessions.ContextView
	if m, err := runtime.nc.Request(contract.SubjectContext, []byte(`{"session_id":"r1"}`), 5*time.Second); err != nil || m.Header.Get("Nats-Service-Error") != "" ||
		json.Unmarshal(m.Data, &view) != nil || !view.Messages[1].IsCompaction {
		t.Fatalf("runtime session.context: %v", err)
	}
	var hist sessions.History
	if m, err := runtime.nc.Request(contract.SubjectHistory, []byte(`{"session_id":"r1"}`), 5*time.Second); err != nil ||
		json.Unmarshal(m.Data, &hist) != nil || len(hist.Compactions) != 1 || len(hist.Messages) != 63 {
		t.Fatalf("runtime session.history: %v (%d compactions)", err, len(hist.Compactions))
	}
	runtime.deniedPublish(t, contract.SubjectReset)
	runtime.deniedPublish(t, "$KV.sessions_0._.r1") // issue 11: no direct writes of any session's record or data
	runtime.deniedPublish(t, "sessions.0._.other.log")
	runtime.deniedPublish(t, "$JS.API.DIRECT.GET.SESSIONS_0")
	runtime.deniedPublish(t, "$JS.API.STREAM.MSG.GET.KV_sessions_0")
	runtime.deniedPublish(t, "$JS.API.STREAM.PURGE.SESSIONS_0")
	runtime.deniedPublish(t, "$JS.API.STREAM.PURGE.KV_sessions_0")
	runtime.deniedPublish(t, "$KV.compaction_breakers.r1")
	runtime.deniedPublish(t, "compaction.completed.r1") // cannot forge results
	runtime.deniedSubscribe(t, "agent.context.>")
	// The CLI's direct store access is the compactor's (and admin's).
	if cli(t, rt, nil, "session", "import", fixture, "--session-id", "r2") == 0 {
		t.Fatal("a runtime wrote KV directly")
	}
	if cli(t, as("compactor"), nil, "session", "import", fixture, "--session-id", "r2") != 0 {
		t.Fatal("the compactor user could not import")
	}
	var del sessions.Deleted
	if cli(t, as("compactor"), &del, "session", "delete", "r2") != 0 || !del.Deleted {
		t.Fatal("the compactor user could not delete a session")
	}

	// The observer saw the result and can list services, and nothing else.
	m, err := seen.NextMsg(5 * time.Second)
	if err != nil || m.Header.Get("ce-type") != contract.TypeCompactionCompleted {
		t.Fatalf("observer did not see the result: %v", err)
	}
	if _, err := observer.nc.Request("$SRV.PING."+contract.ServiceName, nil, 2*time.Second); err != nil {
		t.Fatalf("observer cannot ping the service: %v", err)
	}
	// A session's latest event, by a direct get on its subject.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m, err := observer.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+consumer.ResultStream+".compaction.completed.r1", nil); err != nil ||
		m.Header.Get("ce-type") != contract.TypeCompactionCompleted {
		t.Fatalf("observer reading the session's latest result: %v %v", err, m)
	}
	// Issue 42: the runtime and observer roles pulled from, acked, read
	// and deleted any consumer of COMPACTION_EVENTS, so a default-account
	// runtime read tenant A's results through an operator's consumer
	// filtered to them, and deleted it. They may use no consumer now.
	admin := connectAs(t, as("admin"))
	if _, err := admin.js.CreateOrUpdateConsumer(ctx, consumer.ResultStream, jetstream.ConsumerConfig{Durable: "tenant_a_results",
		FilterSubject: "tenant.TENANT_A.compaction.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	for _, role := range []*roleConn{runtime, observer} {
		role.deniedPublish(t, "$JS.API.CONSUMER.MSG.NEXT.COMPACTION_EVENTS.tenant_a_results")
		role.deniedPublish(t, "$JS.API.CONSUMER.INFO.COMPACTION_EVENTS.tenant_a_results")
		role.deniedPublish(t, "$JS.API.CONSUMER.DELETE.COMPACTION_EVENTS.tenant_a_results")
		role.deniedPublish(t, "$JS.ACK.COMPACTION_EVENTS.tenant_a_results.1.1.1.1.1")
		role.deniedPublish(t, "$JS.API.CONSUMER.CREATE.COMPACTION_EVENTS.mine.compaction.>")
		role.deniedPublish(t, "$JS.API.DIRECT.GET.COMPACTION_EVENTS.tenant.TENANT_A.compaction.completed.r1")
	}
	if _, err := admin.js.Consumer(ctx, consumer.ResultStream, "tenant_a_results"); err != nil {
		t.Fatalf("the operator's consumer: %v", err)
	}
	// A command the user may not run fails at once, naming the user and
	// the denied subject (it used to wait for its whole timeout).
	start := time.Now()
	code, _, stderr := runCLI(t, "compact", "r1", "--timeout", "60s", "--nats-url", as("observer"))
	if code != 1 || time.Since(start) > 10*time.Second || !strings.Contains(stderr, `NATS user "observer"`) ||
		!strings.Contains(stderr, contract.OverBudgetPrefix+"r1") {
		t.Fatalf("compact as the observer: exit %d after %v: %s", code, time.Since(start), stderr)
	}
	code, _, stderr = runCLI(t, "breaker", "list", "--nats-url", as("runtime"))
	if code != 1 || !strings.Contains(stderr, `NATS user "runtime"`) || !strings.Contains(stderr, "compactor or admin") {
		t.Fatalf("breaker list as a runtime: exit %d: %s", code, stderr)
	}
	runtime.deniedPublish(t, contract.SubjectList)
	observer.deniedPublish(t, contract.OverBudgetPrefix+"r1")
	observer.deniedPublish(t, "$JS.API.DIRECT.GET.KV_sessions_0.$KV.sessions_0._.r1")
	observer.deniedPublish(t, "$JS.API.DIRECT.GET.SESSIONS_0")
	observer.deniedPublish(t, contract.SubjectCompact)
	observer.deniedSubscribe(t, "compactor.>")
}

// sdkRequest sends a ContextOverBudget with the CloudEvents SDK's JetStream
// binding and waits for its result on a core subscription to its subject,
// as the runtime role may (it makes no consumer on the result stream; the
// SDK's core NATS binding reads structured mode only, and results are
// binary mode).
func sdkRequest(t *testing.T, nc *nats.Conn, sid, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := nc.SubscribeSync(contract.CompletedPrefix + sid)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	snd, err := cejs.NewSenderFromConn(nc, consumer.RequestStream, contract.OverBudgetPrefix+sid, nil)
	if err != nil {
		t.Fatalf("the SDK's sender: %v", err)
	}
	sc, err := cloudevents.NewClient(snd)
	if err != nil {
		t.Fatal(err)
	}
	ev := cloudevents.NewEvent()
	ev.SetID(id)
	ev.SetSource("urn:runtime")
	ev.SetType(contract.TypeContextOverBudget)
	if err := ev.SetData(cloudevents.ApplicationJSON, contract.RequestData{SessionID: sid}); err != nil {
		t.Fatal(err)
	}
	if res := sc.Send(ctx, ev); cloudevents.IsUndelivered(res) {
		t.Fatalf("the SDK's send: %v", res)
	}
	want := contract.RequestResultID(id)
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			t.Fatalf("no result: %v", err)
		}
		got, err := events.DecodeEvent(m.Header, m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID() == want {
			if got.Type() != contract.TypeCompactionCompleted {
				t.Fatalf("the result is %s", got)
			}
			return
		}
	}
}

// TestNATSConfTenants is the isolation suite on the repository's
// nats.conf: tenants A and B (accounts TENANT_A and TENANT_B) use one
// session id without meeting, and every path from B to A's sessions,
// results, breakers and store is refused by the server (no such subject in
// B's account, no JetStream) or answers B's own; the operator (admin)
// reaches every tenant; a tenant's observer reads its results only.
func TestNATSConfTenants(t *testing.T) {
	as := natsConfServer(t)
	if code := cli(t, as("admin"), nil, "provision"); code != 0 {
		t.Fatal("admin could not provision")
	}
	startServe(t, as("admin"), "--nats-url", as("compactor"))
	a, b := connectAs(t, as("tenant-a")), connectAs(t, as("tenant-b"))
	call := func(r *roleConn, subject, body string) (map[string]any, string) {
		t.Helper()
		m, err := r.nc.Request(subject, []byte(body), 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", subject, err)
		}
		var out map[string]any
		_ = json.Unmarshal(m.Data, &out)
		return out, m.Header.Get("Nats-Service-Error-Code")
	}
	msgs, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	// One session id, two tenants: A's from the fixture, B's one message.
	if _, code := call(a, contract.SubjectCreate, fmt.Sprintf(`{"session_id":"same","context_limit":6000,"messages":%s}`, msgs)); code != "" {
		t.Fatalf("A's create: %s", code)
	}
	if _, code := call(b, contract.SubjectCreate, `{"session_id":"same","model":"gpt-4o","messages":[{"role":"user","content":"B's only message"}]}`); code != "" {
		t.Fatalf("B's create: %s", code)
	}
	resB, err := b.nc.SubscribeSync("compaction.>")
	if err != nil {
		t.Fatal(err)
	}
	stolen, err := b.nc.SubscribeSync("tenant.TENANT_A.compaction.>")
	if err != nil {
		t.Fatal(err)
	}
	aObserver := connectAs(t, as("tenant-a-observer"))
	resA, err := aObserver.nc.SubscribeSync("compaction.>")
	if err != nil {
		t.Fatal(err)
	}
	_ = b.nc.Flush()
	_ = aObserver.nc.Flush()
	// A compacts by a request event, with the CLI as its runtime would.
	var res map[string]any
	if code := cli(t, as("tenant-a"), &res, "compact", "same", "--timeout", "30s"); code != 0 || res["outcome"] != "compacted" {
		t.Fatalf("A's compact: exit %d %v", code, res)
	}
	if m, err := resA.NextMsg(10 * time.Second); err != nil || m.Subject != contract.CompletedPrefix+"same" {
		t.Fatalf("A's observer: %v %v", m, err)
	}
	for _, sub := range []*nats.Subscription{resB, stolen} {
		if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
			t.Fatalf("B received A's result on %s", m.Subject)
		}
	}
	// B reads, lists and deletes its own session only.
	view, _ := call(b, contract.SubjectContext, `{"session_id":"same"}`)
	if view["compaction_id"] != nil || len(view["messages"].([]any)) != 1 {
		t.Fatalf("B reads %v", view)
	}
	list, _ := call(b, contract.SubjectList, `{}`)
	if got := list["sessions"].([]any); len(got) != 1 || got[0].(map[string]any)["messages"].(float64) != 1 {
		t.Fatalf("B lists %v", list)
	}
	// A's subjects are not in B's account: nothing answers, nothing stores.
	for _, subject := range []string{"tenant.TENANT_A." + contract.SubjectContext, "tenant.TENANT_A." + contract.SubjectDelete, "tenant.TENANT_A." + contract.OverBudgetPrefix + "same"} {
		if _, err := b.nc.Request(subject, []byte(`{"session_id":"same"}`), time.Second); err == nil {
			t.Fatalf("B reached %s", subject)
		}
	}
	// B has no JetStream: neither A's store nor the service's streams.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := b.js.AccountInfo(ctx); err == nil {
		t.Fatal("B has JetStream")
	}
	if _, err := b.js.KeyValue(ctx, "sessions_0"); err == nil {
		t.Fatal("B bound the service's records")
	}
	if _, err := b.js.Stream(ctx, consumer.ResultStream); err == nil {
		t.Fatal("B bound the service's results")
	}
	// A's breaker, opened: B's resets (one, and all) leave it open.
	admin := connectAs(t, as("admin"))
	kv, err := admin.js.KeyValue(ctx, "compaction_breakers")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "TENANT_A.same", []byte(`{"session_id":"same","state":"open","failures":3,"opened_at":"2026-12-05T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{`{"session_id":"same"}`, `{"all":true}`} {
		if _, code := call(b, contract.SubjectReset, body); code != "" {
			t.Fatalf("B's reset %s: %s", body, code)
		}
	}
	if br, _ := call(a, contract.SubjectBreaker, `{"session_id":"same"}`); br["state"] != "open" {
		t.Fatalf("B's resets reached A's breaker: %v", br)
	}
	// The operator's view: each tenant's sessions, and A's open breaker.
	var tenants []map[string]any
	if code := cli(t, as("admin"), &tenants, "tenant", "list"); code != 0 || len(tenants) != 2 ||
		tenants[0]["tenant"] != "TENANT_A" || tenants[0]["sessions"].(float64) != 1 || tenants[1]["tenant"] != "TENANT_B" {
		t.Fatalf("tenant list: exit %d %v", code, tenants)
	}
	var shown map[string]any
	if code := cli(t, as("admin"), &shown, "tenant", "show", "TENANT_A"); code != 0 || shown["breakers_open"].(float64) != 1 || shown["compactions"].(float64) != 1 || shown["bytes"].(float64) <= 0 {
		t.Fatalf("tenant show: exit %d %v", code, shown)
	}
	var listed map[string]any
	if code := cli(t, as("admin"), &listed, "session", "list", "--tenant", "TENANT_B"); code != 0 || len(listed["sessions"].([]any)) != 1 {
		t.Fatalf("session list --tenant: exit %d %v", code, listed)
	}
	if code := cli(t, as("admin"), nil, "session", "list", "--tenant", "not.a.tenant"); code != 2 {
		t.Fatalf("a bad --tenant: exit %d", code)
	}
	// B deletes its session; A's stays, and the operator reaches it.
	if _, code := call(b, contract.SubjectDelete, `{"session_id":"same"}`); code != "" {
		t.Fatalf("B's delete: %s", code)
	}
	if _, code := call(b, contract.SubjectContext, `{"session_id":"same"}`); code != "404" {
		t.Fatalf("B's session after its delete: %s", code)
	}
	if view, code := call(admin, "tenant.TENANT_A."+contract.SubjectContext, `{"session_id":"same"}`); code != "" || view["compaction_id"] == nil {
		t.Fatalf("the operator reads A's session: %s %v", code, view)
	}
	if view, code := call(a, contract.SubjectContext, `{"session_id":"same"}`); code != "" || view["compaction_id"] == nil {
		t.Fatalf("A's session after B's delete: %s %v", code, view)
	}
	// A tenant's observer reads results and nothing else.
	aObserver.deniedPublish(t, contract.SubjectCompact)
	aObserver.deniedPublish(t, contract.OverBudgetPrefix+"same")
}
