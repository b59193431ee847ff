package consumer_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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
		m := nats.NewMsg(events.OverBudgetPrefix + "s1")
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
