package consumer_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/natstest"
)

func TestProvisionIdempotent(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	for range 2 {
		if err := consumer.Provision(ctx, js, consumer.Settings{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{consumer.RequestStream, consumer.ResultStream, consumer.DLQStream} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s: %v", name, err)
		}
	}
	c, err := js.Consumer(ctx, consumer.RequestStream, consumer.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := c.CachedInfo().Config; cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.MaxDeliver != consumer.MaxDeliver {
		t.Fatalf("consumer config %+v", cfg)
	}
	// A request is stored once however often it is published with its id.
	for range 2 {
		m := nats.NewMsg(contract.OverBudgetPrefix + "s1")
		m.Header.Set("Nats-Msg-Id", "evt-1")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := js.Stream(ctx, consumer.RequestStream)
	info, _ := st.Info(ctx)
	if info.State.Msgs != 1 {
		t.Fatalf("%d requests stored, want 1", info.State.Msgs)
	}
}

// A server provisioned before the dead letters moved to compactor.dlq.>
// has a DLQ stream on compaction.dlq.> and results on four subjects.
// Provisioning migrates both: the old dead letters stay, new ones go to
// the new prefix, and a consumer bound by subject compaction.> finds the
// result stream (it failed with "no stream matches subject" before).
func TestProvisionMigratesTheDLQ(t *testing.T) {
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: consumer.DLQStream, Subjects: []string{"compaction.dlq.>", consumer.MaxDeliveriesAdvisory}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: consumer.ResultStream,
		Subjects: []string{"compaction.completed.>", "compaction.failed.>", "compaction.circuit_opened.>", "compaction.circuit_closed.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, events.LegacyDLQPrefix+"s1", []byte("an old dead letter")); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Provision(ctx, js, consumer.Settings{}); err != nil {
		t.Fatal(err)
	}
	dlq, _ := js.Stream(ctx, consumer.DLQStream)
	if got := dlq.CachedInfo().Config.Subjects; len(got) != 3 || got[0] != contract.DLQSubjects || got[2] != "tenant.*."+contract.DLQSubjects {
		t.Fatalf("DLQ subjects %v", got)
	}
	if _, err := js.Publish(ctx, contract.DLQPrefix+"s1", []byte("a new dead letter")); err != nil {
		t.Fatal(err)
	}
	info, _ := dlq.Info(ctx)
	if info.State.Msgs != 2 {
		t.Fatalf("DLQ holds %d messages, want the old one and the new one", info.State.Msgs)
	}
	// The legacy API binds a subscription by subject alone, as the
	// CloudEvents SDK's JetStream binding does.
	old, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := old.SubscribeSync("compaction.>")
	if err != nil {
		t.Fatalf("a consumer on compaction.>: %v", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if _, err := js.Publish(ctx, contract.FailedPrefix+"s1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || m.Subject != contract.FailedPrefix+"s1" {
		t.Fatalf("result through compaction.>: %v %v", m, err)
	}
}

// Issue 42: no stream had a byte limit, so one runtime could fill the
// store for every tenant. The request, result and dead-letter streams
// share EventBytes (reserved in the server's store): a flood of requests
// is refused at its quarter, the oldest results and dead letters make
// room. A store provisioned unbounded is bounded by the next provision.
func TestProvisionBoundsTheEventStreams(t *testing.T) {
	_, _, js := natstest.Start(t)
	ctx := context.Background()
	if err := consumer.Provision(ctx, js, consumer.Settings{EventBytes: -1}); err != nil {
		t.Fatal(err)
	}
	if st, _ := js.Stream(ctx, consumer.RequestStream); st.CachedInfo().Config.MaxBytes > 0 {
		t.Fatalf("EventBytes -1 bounded the requests: %+v", st.CachedInfo().Config)
	}
	const bytes = 4 << 20
	if err := consumer.Provision(ctx, js, consumer.Settings{EventBytes: bytes}); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		max     int64
		discard jetstream.DiscardPolicy
	}{consumer.RequestStream: {bytes / 4, jetstream.DiscardNew}, consumer.ResultStream: {bytes / 2, jetstream.DiscardOld},
		consumer.DLQStream: {bytes / 4, jetstream.DiscardOld}} {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := st.CachedInfo().Config; cfg.MaxBytes != want.max || cfg.Discard != want.discard {
			t.Fatalf("%s: max bytes %d, discard %v; want %d, %v", name, cfg.MaxBytes, cfg.Discard, want.max, want.discard)
		}
	}
	// A flood of requests is refused at the requests' share.
	body := make([]byte, 64<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		m := nats.NewMsg(contract.OverBudgetPrefix + "flood")
		m.Data = body
		_, err = js.PublishMsg(ctx, m)
	}
	if err == nil || !strings.Contains(err.Error(), "maximum bytes exceeded") {
		t.Fatalf("6.4 MB of requests in a 1 MB share: %v", err)
	}
}
