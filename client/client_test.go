package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
)

type brokenModel struct{}

func (brokenModel) Summarize(context.Context, pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	return pipeline.SummaryResponse{}, errors.New("the summary model answered 400: this model is retired")
}

func setup(t *testing.T, sum pipeline.Summarizer) *client.Client {
	t.Helper()
	nc, _ := natstest.ConnectURL(t, serviceURL(t, sum))
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// serviceURL runs a service for the test with sum (nil: the offline
// summariser; another trips its breakers at once) and returns its URL.
func serviceURL(t *testing.T, sum pipeline.Summarizer) string {
	t.Helper()
	var svc *app.App
	var err error
	if sum == nil {
		svc, err = startService(t.TempDir())
	} else {
		cfg := pipeline.DefaultConfig()
		cfg.MaxFailures = 1
		svc, err = app.Start(context.Background(), app.Config{Provision: true, Embedded: embedded.Options{Port: -1, DataDir: t.TempDir()},
			Pipeline: cfg, Summarizer: sum})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	return svc.URL
}

func turns(from, n int) []client.Message {
	var out []client.Message
	for i := from; i < from+n; i++ {
		out = append(out, client.Text(fmt.Sprintf("u%d", i), client.User, fmt.Sprintf("question %d: where is my bag tagged BAG-%04d now?", i, i)),
			client.Text(fmt.Sprintf("a%d", i), client.Assistant, fmt.Sprintf("bag BAG-%04d is in Lisbon; it arrives on day %d", i, i%28+1)))
	}
	return out
}

func TestOptionsAreValidated(t *testing.T) {
	if _, err := client.New(nil); err == nil {
		t.Error("a nil connection accepted")
	}
	srv, err := embedded.Start(embedded.Options{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer embedded.Stop(srv)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Option{client.WithSource(""), client.WithSource("%zz"), client.WithTimeout(0), client.WithTimeout(-time.Second)} {
		if _, err := client.New(nc, o); err == nil {
			t.Error("a bad option accepted")
		}
	}
	c, err := client.New(nc, client.WithSource("urn:x"), client.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Context(ctx, "a.b"); err == nil || !strings.Contains(err.Error(), "session_id") {
		t.Errorf("a bad session id: %v", err)
	}
	if _, err := c.Compact(ctx, "s", client.CompactRequest{Trigger: client.Manual}); err == nil {
		t.Error("a bad trigger accepted")
	}
	// No service on this server: said at once, not after a timeout.
	start := time.Now()
	if _, err := c.Context(ctx, "s1"); !errors.Is(err, client.ErrNoService) || time.Since(start) > time.Second {
		t.Errorf("no service: %v after %v", err, time.Since(start))
	}
	nc.Close()
	if _, err := client.New(nc); err == nil {
		t.Error("a closed connection accepted")
	}
}

func TestSessionsThroughTheClient(t *testing.T) {
	c := setup(t, nil)
	ctx := context.Background()
	created, err := c.Create(ctx, "s1", client.NewSession{ContextLimit: 3000, Messages: turns(0, 2)})
	if err != nil || created.HeadSeq != 4 {
		t.Fatalf("create: %+v %v", created, err)
	}
	if again, err := c.Create(ctx, "s1", client.NewSession{ContextLimit: 3000, Messages: turns(0, 2)}); err != nil || again != created {
		t.Fatalf("the same create again: %+v %v", again, err)
	}
	if _, err := c.Create(ctx, "s1", client.NewSession{Messages: turns(5, 1)}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("another create on the id: %v", err)
	}
	a1, err := c.Append(ctx, "s1", turns(2, 1))
	if err != nil || a1.HeadSeq != 6 || a1.Status != "applied" {
		t.Fatalf("append: %+v %v", a1, err)
	}
	if a2, err := c.Append(ctx, "s1", turns(2, 1)); err != nil || a2.HeadSeq != 6 || a2.Status != "already_applied" {
		t.Fatalf("the same append again: %+v %v", a2, err)
	}
	_, err = c.Append(ctx, "s1", turns(3, 1), client.ExpectHead(4))
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrConflict) || ce.HeadSeq == nil || *ce.HeadSeq != 6 || ce.Retryable() {
		t.Fatalf("append at a stale head: %v", err)
	}
	if _, err := c.Append(ctx, "nope", turns(0, 1)); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("append to no session: %v", err)
	}
	// A message over max_payload (1 MiB here) is uploaded in parts and
	// appended with the others at once; read back, it comes in parts.
	big := client.Text("tool-out", client.User, strings.Repeat("log line: all tests passed\n", 42_000)) // 1.1 MB
	a3, err := c.Append(ctx, "s1", []client.Message{big, client.Text("after", client.Assistant, "noted")})
	if err != nil || a3.HeadSeq != 8 {
		t.Fatalf("append of a large message: %+v %v", a3, err)
	}
	m, err := c.Message(ctx, "s1", 7)
	if err != nil || m.ID != "tool-out" || m.Content.Text != big.Content.Text {
		t.Fatalf("read back: %v (%d bytes)", err, len(m.Content.Text))
	}
	if again, err := c.Append(ctx, "s1", []client.Message{big, client.Text("after", client.Assistant, "noted")}); err != nil || again.Status != "already_applied" {
		t.Fatalf("the large append again: %+v %v", again, err)
	}
	if d, err := c.Delete(ctx, "s1"); err != nil || !d.Deleted {
		t.Fatalf("delete: %+v %v", d, err)
	}
	if _, err := c.Context(ctx, "s1"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("context after delete: %v", err)
	}
}

// Both ways of asking, event and endpoint, give the one result of a
// request; the event's carries the trace.
func TestCompactBothWays(t *testing.T) {
	c := setup(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, sid := range []string{"ev", "sync"} {
		if _, err := c.Create(ctx, sid, client.NewSession{ContextLimit: 1500, Messages: turns(0, 40)}); err != nil {
			t.Fatal(err)
		}
	}
	// The runtime says its cache is warm (used a minute ago, kept five).
	warm := &client.CacheData{LastRequestTime: time.Now().Add(-time.Minute), TTLSeconds: 300}
	req := client.CompactRequest{RequestID: "r-ev", Cache: warm, TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	res, err := c.Compact(ctx, "ev", req)
	if err != nil || res.Outcome != client.OutcomeCompacted || res.RequestID != "r-ev" || res.SessionID != "ev" || res.CacheState != "warm" {
		t.Fatalf("compact by event: %+v %v", res, err)
	}
	// The same request again, after its result was published, is answered
	// with the same result: by event (read from the result stream) and
	// through the endpoint.
	again, err := c.Compact(ctx, "ev", req)
	if err != nil || again.CompactionMessageID != res.CompactionMessageID {
		t.Fatalf("the same request by event: %+v %v", again, err)
	}
	again, err = c.CompactSync(ctx, "ev", req)
	if err != nil || again.CompactionMessageID != res.CompactionMessageID {
		t.Fatalf("the same request through the endpoint: %+v %v", again, err)
	}
	cold := &client.CacheData{LastRequestTime: time.Now().Add(-time.Hour), TTLSeconds: 300}
	sres, err := c.CompactSync(ctx, "sync", client.CompactRequest{Trigger: client.Overflow, Cache: cold})
	if err != nil || sres.Outcome != client.OutcomeCompacted || sres.CacheState != "cold" {
		t.Fatalf("compact by endpoint: %+v %v", sres, err)
	}
	// A failure is a *FailedError, matched by its reason's sentinel (and
	// a missing session by ErrNotFound too), by either way of asking.
	for name, compact := range map[string]func(context.Context, string, client.CompactRequest) (*client.Completed, error){"event": c.Compact, "endpoint": c.CompactSync} {
		nf, err := compact(ctx, "none", client.CompactRequest{})
		var fe *client.FailedError
		if nf != nil || !errors.As(err, &fe) || fe.Reason != client.ReasonSessionNotFound || fe.SessionID != "none" ||
			!errors.Is(err, client.ErrSessionNotFound) || !errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrSummaryFailed) {
			t.Fatalf("an unknown session by %s: %+v %v", name, nf, err)
		}
	}
}

func TestCircuitEvents(t *testing.T) {
	c := setup(t, brokenModel{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(chan client.CircuitEvent, 4)
	sub, err := c.SubscribeCircuit("", func(e client.CircuitEvent) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	if _, err := c.Create(ctx, "s1", client.NewSession{ContextLimit: 1500, Messages: turns(0, 40)}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Compact(ctx, "s1", client.CompactRequest{})
	var fe *client.FailedError
	if res != nil || !errors.As(err, &fe) || !errors.Is(err, client.ErrSummaryFailed) || fe.Failures != 1 {
		t.Fatalf("result %+v %v", res, err)
	}
	select {
	case e := <-got:
		if e.Type != contract.TypeCompactionCircuitOpened || e.SessionID != "s1" || e.Opened == nil || e.Opened.Failures != 1 {
			t.Fatalf("circuit event %+v", e)
		}
	case <-ctx.Done():
		t.Fatal("no circuit event")
	}
	// Drain hands over what arrived, then stops; Closed says when.
	sub.Drain()
	select {
	case <-sub.Closed():
	case <-ctx.Done():
		t.Fatal("a drained subscription did not close")
	}
	sub.Stop() // after a drain: nothing more to do
}

// Issue 42: Compact against a server where no service was ever
// provisioned returned an untyped error; it is ErrNoService, as the
// endpoints' calls are.
func TestCompactWithNoService(t *testing.T) {
	_, nc, _ := natstest.Start(t)
	c, err := client.New(nc, client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(context.Background(), "s1", client.CompactRequest{}); !errors.Is(err, client.ErrNoService) {
		t.Fatalf("Compact with no service: %v, want ErrNoService", err)
	}
	if _, err := c.Context(context.Background(), "s1"); !errors.Is(err, client.ErrNoService) {
		t.Fatalf("Context with no service: %v, want ErrNoService", err)
	}
}
