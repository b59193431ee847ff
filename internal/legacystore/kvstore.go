// Package legacystore reads (and, for tests of the migration, writes) the
// session store's first layout: one KV bucket, sessions, with a key per
// message. The service no longer serves from it: `compactor migrate` moves
// its sessions into kvstore's sharded layout (issue 24). The code is the
// store as it was at dfd368a, kept so that a store written then is read
// with the code that wrote it.
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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

// SessionsBucket is the layout's one bucket.
const SessionsBucket = "sessions"

var _ pipeline.SessionStore = (*Sessions)(nil)

// maxBatch is JetStream's limit of messages in one atomic batch.
const maxBatch = 1000

// maxBatchesInFlight bounds one process's atomic batches in flight, under
// JetStream's 50 per stream.
const maxBatchesInFlight = 32

// casRetries bounds re-reads after a lost compare-and-set.
const casRetries = 50

// MaxMessageBytes bounds one message as JSON (a long log, a screenshot as a
// data URL): larger ones are refused. Values over the connection's
// max_payload are stored in chunks.
const MaxMessageBytes = 64 << 20

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

// indexKey is the key of the index entry of message id: a hash, so that any
// id a runtime chooses makes a valid key.
func indexKey(sid, id string) string {
	h := sha256.Sum256([]byte(id))
	return sid + ".i." + hex.EncodeToString(h[:20])
}

func subject(bucket, key string) string { return "$KV." + bucket + "." + key }
func isNotFound(err error) bool         { return errors.Is(err, jetstream.ErrKeyNotFound) }
func notFound(what string) error        { return fmt.Errorf("%s: %w", what, session.ErrNotFound) }

// Provision creates the sessions bucket as the old layout had it (tests
// make a store of the old layout with it).
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
	// chunk is the largest value written whole; a message over it is
	// stored in chunks of this size.
	chunk int
	// batches bounds this process's atomic batches in flight.
	batches chan struct{}
	// failWrite, in tests, fails a write (an atomic batch or a single
	// value, by key of its last value) before it is sent.
	failWrite func(key string) error
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
	// Room for the headers and the framing of a batch member.
	chunk := min(int(nc.MaxPayload())-16<<10, 512<<10)
	if chunk < 4<<10 {
		return nil, fmt.Errorf("bind bucket %s: max_payload %d is too small", SessionsBucket, nc.MaxPayload())
	}
	return &Sessions{nc: nc, js: js, kv: kv, stream: st, now: time.Now, chunk: chunk, batches: make(chan struct{}, maxBatchesInFlight)}, nil
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
