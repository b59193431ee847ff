// Package consumer owns the JetStream side of the service: the request,
// result and dead-letter streams, the durable pull consumer and its ack
// policy.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/tenant"
)

// Stream, subject and consumer names (SPEC §8).
const (
	RequestStream  = contract.RequestStream
	ResultStream   = contract.ResultStream
	DLQStream      = contract.DLQStream
	Durable        = "compactor"
	RequestSubject = contract.RequestSubjects
	ResultSubject  = contract.ResultSubjects
	DLQSubject     = contract.DLQSubjects
)

// Defaults of the durable consumer.
const (
	// AckWait is how long a delivery may go without an InProgress
	// heartbeat before it is redelivered (the heartbeat runs at AckWait/3,
	// so this is also how soon a crashed or paused replica's work is
	// picked up by another: seconds, not the half minute it was).
	AckWait = 5 * time.Second
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
	// EventBytes bounds the request, result and dead-letter streams
	// together (a quarter, a half and a quarter; 0: DefaultEventBytes;
	// negative: unbounded). JetStream reserves it in the server's store,
	// so a session store filled to the server's max_file_store still takes
	// results; a flood of requests is refused at its quarter, and the
	// oldest results and dead letters make room for new ones.
	EventBytes int64
}

// DefaultEventBytes is what the request, result and dead-letter streams
// may hold together by default.
const DefaultEventBytes = 1 << 30

// limits sets cfg's byte limit: what its share of bytes allows, refusing
// new messages when full (requests) or dropping the oldest (results, dead
// letters).
func limits(cfg *jetstream.StreamConfig, bytes int64, discard jetstream.DiscardPolicy) {
	if bytes > 0 {
		cfg.MaxBytes, cfg.Discard = bytes, discard
	}
}

// Provision makes the three streams and the durable consumer match set
// (idempotent). It reads first and writes only what is missing or differs,
// so a service whose user may only read stream and consumer info starts
// against assets an administrator provisioned. Redeliveries are spaced by
// the service (NakWithDelay), not by a server BackOff, which would skew
// client delays.
func Provision(ctx context.Context, js jetstream.JetStream, set Settings) error {
	replicas := max(set.Replicas, 1)
	ackWait, maxDeliver := set.AckWait, set.MaxDeliver
	if ackWait <= 0 {
		ackWait = AckWait
	}
	if maxDeliver <= 0 {
		maxDeliver = MaxDeliver
	}
	// The DLQ comes before the results: an older DLQ stream holds
	// compaction.dlq.>, which must be freed (its subjects migrated to
	// compactor.dlq.>) before COMPACTION_EVENTS can take compaction.>.
	// The dead letters it holds stay, under their old subjects.
	// Each stream holds the default tenant's subjects and every tenant's
	// (tenant.<account>.<subject>: what an account's import of the
	// service's export writes).
	streams := []jetstream.StreamConfig{
		{Name: RequestStream, Subjects: []string{RequestSubject, tenant.Wildcard(RequestSubject)}, Retention: jetstream.WorkQueuePolicy, Duplicates: DedupWindow, MaxAge: 7 * 24 * time.Hour},
		{Name: DLQStream, Subjects: []string{DLQSubject, MaxDeliveriesAdvisory, tenant.Wildcard(DLQSubject)}, Duplicates: DedupWindow, MaxAge: 30 * 24 * time.Hour},
		// Direct gets: an observer reads a session's latest event by its
		// subject, with no consumer.
		{Name: ResultStream, Subjects: []string{ResultSubject, tenant.Wildcard(ResultSubject)}, Duplicates: DedupWindow, MaxAge: 7 * 24 * time.Hour, AllowDirect: true},
	}
	bytes := set.EventBytes
	if bytes == 0 {
		bytes = DefaultEventBytes
	}
	limits(&streams[0], bytes/4, jetstream.DiscardNew)
	limits(&streams[1], bytes/4, jetstream.DiscardOld)
	limits(&streams[2], bytes/2, jetstream.DiscardOld)
	for _, cfg := range streams {
		cfg.Replicas, cfg.Storage = replicas, jetstream.FileStorage
		if err := ensureStream(ctx, js, cfg); err != nil {
			if strings.Contains(err.Error(), "insufficient storage") || strings.Contains(err.Error(), "insufficient resources") {
				return fmt.Errorf("%w (the server's JetStream store cannot reserve the %d bytes the request, result and dead-letter streams may hold: raise its max_file_store, or provision with a smaller --event-bytes)", err, bytes)
			}
			return err
		}
	}
	want := jetstream.ConsumerConfig{
		Durable:       Durable,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       ackWait,
		MaxDeliver:    maxDeliver,
		MaxAckPending: 1000,
		Replicas:      replicas,
	}
	c, err := js.Consumer(ctx, RequestStream, Durable)
	if err == nil {
		have := c.CachedInfo().Config
		if have.AckPolicy == want.AckPolicy && have.AckWait == want.AckWait && have.MaxDeliver == want.MaxDeliver &&
			have.MaxAckPending == want.MaxAckPending && max(have.Replicas, 1) == want.Replicas && len(have.BackOff) == 0 {
			return nil
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("provision consumer %s: %w", Durable, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, RequestStream, want); err != nil {
		return fmt.Errorf("provision consumer %s: %w", Durable, err)
	}
	return nil
}

// ensureStream creates the stream, or updates it where it differs from
// want in the fields the service relies on.
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	st, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("provision stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("provision stream %s: %w", want.Name, err)
	}
	have := st.CachedInfo().Config
	if slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention && have.Duplicates == want.Duplicates &&
		have.MaxAge == want.MaxAge && max(have.Replicas, 1) == want.Replicas && have.Storage == want.Storage &&
		max(have.MaxBytes, 0) == max(want.MaxBytes, 0) && (want.MaxBytes <= 0 || have.Discard == want.Discard) && have.AllowDirect == want.AllowDirect {
		return nil
	}
	if have.Retention != want.Retention || have.Storage != want.Storage {
		return fmt.Errorf("provision stream %s: it exists with retention %v and storage %v, want %v and %v (these cannot change: delete it or fix it by hand)",
			want.Name, have.Retention, have.Storage, want.Retention, want.Storage)
	}
	upd := have
	upd.Subjects, upd.Duplicates, upd.MaxAge, upd.Replicas = want.Subjects, want.Duplicates, want.MaxAge, want.Replicas
	upd.MaxBytes, upd.Discard, upd.AllowDirect = want.MaxBytes, want.Discard, want.AllowDirect
	if want.MaxBytes == 0 {
		upd.MaxBytes = -1
	}
	if _, err := js.UpdateStream(ctx, upd); err != nil {
		return fmt.Errorf("provision stream %s: update: %w", want.Name, err)
	}
	return nil
}
