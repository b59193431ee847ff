// Package legacystore reads the session store's first layout, and
// deletes from it, as `compactor migrate` needs: one KV bucket, sessions,
// with a key per message. The service no longer serves from it: migrate
// moves its sessions into kvstore's sharded layout (issue 24). The code is
// the reading half of the store as it was at dfd368a, so that a store
// written then is read with the code that wrote it; the writing half is
// gone, and the migration's test loads a bucket that half wrote
// (internal/migrate/testdata).
//
// Layout of the sessions bucket, one value per key so that no value nears
// max_payload whatever the session's size:
//
//	<sid>.rec            the record: the session's head, the commit point
//	<sid>.m.<seq>        one message each (seq zero-padded)
//	<sid>.b.<seq>.<n>    the chunks of a message too large for one value
//	<sid>.i.<id hash>    the seq of the message with that id (idempotent appends)
//	<sid>.c.<id>         compaction messages, append-only
//
// A create and an append are JetStream atomic batches (the messages, their
// id index entries, the record with its expected revision): they apply whole
// or not at all, and a repeated one is recognised (a create by its digest, an
// append by its message ids). A compaction's commit writes its message, then
// the record with compare-and-set: the record is the commit point.
//
// Reads that decide something see the latest committed state also on a
// cluster whose followers lag: the record is read from the stream leader
// (the direct gets KV uses may be answered by any replica), and the
// immutable values it names are read with batched direct gets, a value that
// a lagging replica lacks (or holds from a deleted incarnation of the
// session, told by its epoch header) read again from the leader.
package legacystore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
)

// SessionsBucket is the layout's one bucket.
const SessionsBucket = "sessions"

// casRetries bounds re-reads after a lost compare-and-set.
const casRetries = 50

// opTimeout bounds one backend request. A request sent just before its
// server died is never answered: it must not hold the operation (and
// whatever waits behind it) for the caller's whole deadline, when a retry
// through another server would succeed.
const opTimeout = 5 * time.Second

// hdrEpoch tags every value of a session with its record's epoch.
const hdrEpoch = "Compactor-Epoch"

func checkID(id string) error {
	if err := contract.CheckSessionID(id); err != nil {
		return fmt.Errorf("%w: %v", session.ErrInvalid, err)
	}
	return nil
}

func recKey(sid string) string            { return sid + ".rec" }
func msgKey(sid string, seq int64) string { return fmt.Sprintf("%s.m.%012d", sid, seq) }
func compKey(sid, id string) string       { return sid + ".c." + id }
func chunkKey(sid string, seq int64, n int) string {
	return fmt.Sprintf("%s.b.%012d.%04d", sid, seq, n)
}

func subject(bucket, key string) string { return "$KV." + bucket + "." + key }
func notFound(what string) error        { return fmt.Errorf("%s: %w", what, session.ErrNotFound) }

// Provision creates the sessions bucket as the old layout had it (the
// migration's test loads a store of the old layout into it).
func Provision(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		replicas = 1
	}
	for _, b := range []string{SessionsBucket} {
		st, err := js.Stream(ctx, "KV_"+b)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			st = nil
		case err != nil:
			return fmt.Errorf("provision bucket %s: %w", b, err)
		}
		if st == nil || max(st.CachedInfo().Config.Replicas, 1) != replicas {
			_, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
			if err != nil {
				return fmt.Errorf("provision bucket %s: %w", b, err)
			}
			if st, err = js.Stream(ctx, "KV_"+b); err != nil {
				return fmt.Errorf("provision bucket %s: %w", b, err)
			}
		}
		if cfg := st.CachedInfo().Config; b == SessionsBucket && !cfg.AllowAtomicPublish {
			cfg.AllowAtomicPublish = true
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return fmt.Errorf("provision: enable atomic batches on KV_%s: %w", SessionsBucket, err)
			}
		}
	}
	return nil
}

// Sessions is the session store. It is safe for concurrent use, also by
// several processes.
type Sessions struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	stream jetstream.Stream
	now    func() time.Time
}

// NewSessions binds the provisioned sessions bucket.
func NewSessions(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*Sessions, error) {
	kv, err := js.KeyValue(ctx, SessionsBucket)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", SessionsBucket, err)
	}
	st, err := js.Stream(ctx, "KV_"+SessionsBucket)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", SessionsBucket, err)
	}
	return &Sessions{nc: nc, js: js, kv: kv, stream: st, now: time.Now}, nil
}

// withTimeout bounds one backend request to opTimeout (or ctx's earlier
// deadline).
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// unavailable marks an error of the backend's transport or cluster (no
// responders, a timeout, no leader) as session.ErrUnavailable, so callers
// know that repeating the operation is what to do. ctx's own end is not
// the backend's fault and is returned as it is.
func unavailable(ctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrSlowConsumer):
		return fmt.Errorf("%s: %w: %v", what, session.ErrUnavailable, err)
	case errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.Code == 429):
		// No leader, or too many atomic batches in flight on the stream.
		return fmt.Errorf("%s: %w: %v", what, session.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
