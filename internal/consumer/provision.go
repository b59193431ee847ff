// Package consumer owns the JetStream side of the service: the request,
// result and dead-letter streams, the durable pull consumer and its ack
// policy.
package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream, subject and consumer names (SPEC §8).
const (
	RequestStream  = "AGENT_CONTEXT"
	ResultStream   = "COMPACTION_EVENTS"
	DLQStream      = "COMPACTION_DLQ"
	Durable        = "compactor"
	RequestSubject = "agent.context.>"
	OverBudget     = "agent.context.over_budget."
	Overflow       = "agent.context.overflow."
	ResultSubject  = "compaction.>"
	DLQSubject     = "compaction.dlq.>"
)

// Settings of the durable consumer.
const (
	// AckWait is how long a delivery may run without an InProgress
	// heartbeat before it is redelivered.
	AckWait = 60 * time.Second
	// MaxDeliver bounds redeliveries; past it a request goes to the DLQ.
	MaxDeliver = 5
	// DedupWindow covers client retries and the redelivery horizon, so a
	// result published twice is stored once.
	DedupWindow = 30 * time.Minute
)

// Backoff spaces redeliveries of a failed request.
var Backoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// Provision creates or updates the three streams and the durable consumer
// (idempotent), each stream with replicas copies.
func Provision(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		replicas = 1
	}
	streams := []jetstream.StreamConfig{
		{Name: RequestStream, Subjects: []string{RequestSubject}, Retention: jetstream.WorkQueuePolicy, Duplicates: DedupWindow, MaxAge: 7 * 24 * time.Hour},
		{Name: ResultStream, Subjects: []string{"compaction.completed.>", "compaction.failed.>", "compaction.circuit_opened.>", "compaction.circuit_closed.>"}, Duplicates: DedupWindow, MaxAge: 7 * 24 * time.Hour},
		{Name: DLQStream, Subjects: []string{DLQSubject}, Duplicates: DedupWindow, MaxAge: 30 * 24 * time.Hour},
	}
	for _, cfg := range streams {
		cfg.Replicas, cfg.Storage = replicas, jetstream.FileStorage
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("provision stream %s: %w", cfg.Name, err)
		}
	}
	_, err := js.CreateOrUpdateConsumer(ctx, RequestStream, jetstream.ConsumerConfig{
		Durable:       Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       AckWait,
		MaxDeliver:    MaxDeliver,
		BackOff:       Backoff,
		MaxAckPending: 1000,
		Replicas:      replicas,
	})
	if err != nil {
		return fmt.Errorf("provision consumer %s: %w", Durable, err)
	}
	return nil
}
