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
	ResultSubject  = "compaction.>"
	DLQSubject     = "compaction.dlq.>"
)

// Defaults of the durable consumer.
const (
	// AckWait is how long a delivery may go without an InProgress
	// heartbeat before it is redelivered (the heartbeat runs at AckWait/3,
	// so this is also how soon a crashed replica's work is picked up).
	AckWait = 30 * time.Second
	// MaxDeliver bounds deliveries; past it a request goes to the DLQ.
	MaxDeliver = 5
	// DedupWindow covers client retries and the redelivery horizon
	// (AckWait × MaxDeliver plus the retry delays), so a result published
	// twice is stored once.
	DedupWindow = 30 * time.Minute
	// MaxDeliveriesAdvisory is captured by the DLQ stream: a request whose
	// deliveries all ended without an answer (crash loops) is recorded there
	// by the server itself.
	MaxDeliveriesAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + RequestStream + "." + Durable
)

// Settings size the provisioned streams, buckets and consumer.
type Settings struct {
	// Replicas of every stream (3 on a cluster); 0 means 1.
	Replicas int
	// AckWait and MaxDeliver of the durable consumer; 0 means the defaults.
	AckWait    time.Duration
	MaxDeliver int
}

// Provision creates or updates the three streams and the durable consumer
// (idempotent). Redeliveries are spaced by the service (NakWithDelay), not
// by a server BackOff, which would skew client delays.
func Provision(ctx context.Context, js jetstream.JetStream, set Settings) error {
	replicas := max(set.Replicas, 1)
	ackWait, maxDeliver := set.AckWait, set.MaxDeliver
	if ackWait <= 0 {
		ackWait = AckWait
	}
	if maxDeliver <= 0 {
		maxDeliver = MaxDeliver
	}
	streams := []jetstream.StreamConfig{
		{Name: RequestStream, Subjects: []string{RequestSubject}, Retention: jetstream.WorkQueuePolicy, Duplicates: DedupWindow, MaxAge: 7 * 24 * time.Hour},
		{Name: ResultStream, Subjects: []string{"compaction.completed.>", "compaction.failed.>", "compaction.circuit_opened.>", "compaction.circuit_closed.>"}, Duplicates: DedupWindow, MaxAge: 7 * 24 * time.Hour},
		{Name: DLQStream, Subjects: []string{DLQSubject, MaxDeliveriesAdvisory}, Duplicates: DedupWindow, MaxAge: 30 * 24 * time.Hour},
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
		AckWait:       ackWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: 1000,
		Replicas:      replicas,
	})
	if err != nil {
		return fmt.Errorf("provision consumer %s: %w", Durable, err)
	}
	return nil
}
