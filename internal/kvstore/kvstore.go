// Package kvstore keeps sessions and circuit breakers in JetStream, behind
// the pipeline's store interfaces.
//
// Sessions are spread over shards (a stable hash of tenant and session id;
// the count is fixed when the store is provisioned). Each shard is a KV
// bucket of records and a stream of session data, each with its own Raft
// leader, so that a cluster's nodes share the work:
//
//	KV sessions_<n>, key <tenant>.<sid>     the record: head, compaction state, the commit point
//	SESSIONS_<n>, sessions.<n>.<tenant>.<sid>.log    the messages, one stream message per append
//	                                    .c      compaction messages
//	                                    .b      the chunks of messages too large for one value
//	                                    .prep   the prepared compaction (a rollup: only the latest)
//	                                    .u.<h>  the parts of an upload
//
// A session is a handful of subjects however many messages it holds
// (JetStream keeps every subject of a stream in memory). An append is one
// stream message on the session's log subject, written with the subject's
// expected last sequence (the record's log.seq): two appends on one view
// cannot both land. The record, written next with compare-and-set, is the
// commit point readers follow; an entry past it (its writer stopped between
// the two writes) is adopted by the next append, so an append lands whole
// or not at all. Message ids are idempotent against the record's window of
// recent ids. The record indexes the stream sequence of every 64th message,
// so any message is one batched read away.
//
// Reads that decide something see the latest committed state also on a
// cluster whose followers lag: the record is read from the stream leader;
// the immutable entries it names are read with batched direct gets (any
// replica), and what a lagging replica lacks is read from the leader.
package kvstore

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/compactor/compactor/internal/keylock"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// Names of the store's buckets and streams.
const (
	// RecordsBucketPrefix + n is shard n's bucket of records.
	RecordsBucketPrefix = "sessions_"
	// DataStreamPrefix + n is shard n's stream of session data, on the
	// subjects DataSubjectPrefix + n + ".>".
	DataStreamPrefix  = "SESSIONS_"
	DataSubjectPrefix = "sessions."
	BreakersBucket    = "compaction_breakers"
	// MetaBucket holds the layout (its shard count), the leases of the
	// work one replica does for the deployment (the idle sweep, the usage
	// scan), the tenants' usage and model use this hour, and the replicas'
	// heartbeats.
	MetaBucket = "compactor_meta"
	// DefaultTenant is the tenant of a deployment without tenants
	// (tenant.Default): the level of the key that names a session's
	// tenant.
	DefaultTenant = tenant.Default
	// LayoutVersion is the layout this package writes (the first, one KV
	// bucket with a key per message, is legacystore's).
	LayoutVersion = 2
)

// RecordsBucket is the bucket of shard n's records.
func RecordsBucket(n int) string { return RecordsBucketPrefix + strconv.Itoa(n) }

// DataStream is the stream of shard n's session data.
func DataStream(n int) string { return DataStreamPrefix + strconv.Itoa(n) }

var (
	_ pipeline.SessionStore = (*Sessions)(nil)
	_ pipeline.BreakerStore = (*Breakers)(nil)
)

// casRetries bounds re-reads after a lost compare-and-set.
const casRetries = 50

// MaxMessageBytes bounds one message as JSON (a long log, a screenshot as a
// data URL): larger ones are refused. Values over the connection's
// max_payload are stored in chunks.
const MaxMessageBytes = 64 << 20

// maxAppend bounds the messages of one append or one entry of a create.
const maxAppend = 2000

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

func isNotFound(err error) bool  { return errors.Is(err, jetstream.ErrKeyNotFound) }
func notFound(what string) error { return fmt.Errorf("%s: %w", what, session.ErrNotFound) }

// ShardOf returns the shard of a session among n: a jump consistent hash of
// tenant and id, so that a store with more shards would move only the
// sessions the new shards take.
func ShardOf(tenant, sid string, n int) int {
	h := fnv.New64a()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(sid))
	key := h.Sum64()
	var b, j int64 = -1, 0
	for j < int64(n) {
		b = j
		key = key*2862933555777941757 + 1
		j = int64(float64(b+1) * (float64(int64(1)<<31) / float64((key>>33)+1)))
	}
	return int(b)
}

// shard is one shard's bucket of records and stream of data.
type shard struct {
	n       int
	records jetstream.KeyValue
	recs    jetstream.Stream // the records bucket's stream
	data    jetstream.Stream
	// ttl: the data stream takes per-message TTLs (upload parts expire).
	ttl bool
}

// where names one session: its shard, tenant and id.
type where struct {
	sh     *shard
	tenant string
	sid    string
}

func (w where) recKey() string { return tenant.Key(w.tenant, w.sid) }

func (w where) cacheKey() string { return strconv.Itoa(w.sh.n) + "." + w.recKey() }

// recSubject is the record's subject in its bucket's stream.
func (w where) recSubject() string {
	return "$KV." + RecordsBucket(w.sh.n) + "." + w.recKey()
}

// subject is the session's data subject of kind (log, c, b, prep, u.<h>).
func (w where) subject(kind string) string {
	return DataSubjectPrefix + strconv.Itoa(w.sh.n) + "." + w.tenant + "." + w.sid + "." + kind
}

func (w where) dataStream() string    { return DataStream(w.sh.n) }
func (w where) recordsStream() string { return "KV_" + RecordsBucket(w.sh.n) }

// Sessions is the session store. It is safe for concurrent use, also by
// several processes.
type Sessions struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	shards []*shard
	meta   jetstream.KeyValue
	now    func() time.Time
	mux    *batchMux
	// chunk is the largest value written whole; a message over it is
	// stored in chunks of this size.
	chunk int
	// holder names this process in the leases it takes.
	holder string
	// cache holds the records this process last wrote or loaded, so that
	// the next append to a session, or the commit of a compaction planned
	// on a load, skips reading it: every write is guarded (the log's last
	// sequence, the record's revision), so a stale one only costs a retry;
	// what an append answers without writing is decided on a record read
	// from the leader.
	cacheMu sync.Mutex
	cache   map[string]record
	// appending queues this process's appends to a session: from many
	// requests at once they would race each other's compare-and-set, and
	// under a flood (dozens of requests on one session) some lost every
	// try. Queued, each starts from the record the last one wrote; only
	// another process's appends race.
	appending keylock.Locks
	// checkpointAge overrides checkpointAge (SetCheckpointAge).
	checkpointAge time.Duration
	// failWrite, in tests, fails a write (by its subject) before it is
	// sent.
	failWrite func(subject string) error
	// beforeRead, in tests, sees each read of a stream before it is sent:
	// leader says whether the leader answers it, subj is what it reads.
	beforeRead func(leader bool, subj string)
	// fullSince and fullLast (unix nanoseconds; 0: none) are when writes
	// began to be refused for want of room, and the last that was: a
	// write that passes ends it (Full).
	fullSince, fullLast atomic.Int64
}

// fullFor is how long after the last write refused for want of room, with
// none passing since, the store still says it is full.
const fullFor = 30 * time.Second

// Full says since when the store refuses writes for want of room (its
// server at max_file_store, a stream at its byte limit), ok false when it
// does not: the last write refused so was followed by one that passed, or
// came more than 30 s ago.
func (s *Sessions) Full() (since time.Time, ok bool) {
	last := s.fullLast.Load()
	if last == 0 || s.now().Sub(time.Unix(0, last)) > fullFor {
		return time.Time{}, false
	}
	return time.Unix(0, s.fullSince.Load()), true
}

// wrote notes a write's outcome for Full.
func (s *Sessions) wrote(err error) {
	switch {
	case err == nil:
		if s.fullLast.Load() != 0 {
			s.fullLast.Store(0)
		}
	case errors.Is(err, session.ErrStorageFull):
		now := s.now().UnixNano()
		if _, ok := s.Full(); !ok {
			s.fullSince.Store(now)
		}
		s.fullLast.Store(now)
	}
}

// NewSessions binds the provisioned store: its layout, read from the meta
// bucket, and every shard's bucket and stream.
func NewSessions(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*Sessions, error) {
	meta, err := js.KeyValue(ctx, MetaBucket)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w (provision the store: compactor provision)", MetaBucket, err)
	}
	lay, err := readLayout(ctx, meta)
	if err != nil {
		return nil, err
	}
	// Room for the headers of a value.
	chunk := min(int(nc.MaxPayload())-16<<10, 512<<10)
	if chunk < 4<<10 {
		return nil, fmt.Errorf("bind the session store: max_payload %d is too small", nc.MaxPayload())
	}
	s := &Sessions{nc: nc, js: js, meta: meta, now: time.Now, chunk: chunk, holder: nats.NewInbox()[len(nats.InboxPrefix):],
		cache: map[string]record{}}
	for n := range lay.Shards {
		sh := &shard{n: n}
		if sh.records, err = js.KeyValue(ctx, RecordsBucket(n)); err != nil {
			return nil, fmt.Errorf("bind bucket %s: %w", RecordsBucket(n), err)
		}
		if sh.recs, err = js.Stream(ctx, "KV_"+RecordsBucket(n)); err != nil {
			return nil, fmt.Errorf("bind bucket %s: %w", RecordsBucket(n), err)
		}
		if sh.data, err = js.Stream(ctx, DataStream(n)); err != nil {
			return nil, fmt.Errorf("bind stream %s: %w", DataStream(n), err)
		}
		sh.ttl = sh.data.CachedInfo().Config.AllowMsgTTL
		s.shards = append(s.shards, sh)
	}
	// Subscribed last: an attempt that failed above (a stream with no
	// leader yet) leaves no subscription behind when it is made again.
	if s.mux, err = newBatchMux(nc); err != nil {
		return nil, err
	}
	return s, nil
}

// Shards returns the store's shard count.
func (s *Sessions) Shards() int { return len(s.shards) }

// where places a session of ctx's tenant (the default tenant's where the
// store always kept them).
func (s *Sessions) where(ctx context.Context, sid string) (where, error) {
	if err := checkID(sid); err != nil {
		return where{}, err
	}
	t := tenant.From(ctx)
	return where{sh: s.shards[ShardOf(t, sid, len(s.shards))], tenant: t, sid: sid}, nil
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
	if Full(err) {
		return fmt.Errorf("%s: %w: %v (delete sessions to free space, or raise the server's max_file_store)", what, session.ErrStorageFull, err)
	}
	if Transient(err) {
		return fmt.Errorf("%s: %w: %v", what, session.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// JetStream's codes of a write refused for want of room.
const (
	// errCodeInsufficientResources: the server's (or account's) store is
	// at its max_file_store.
	errCodeInsufficientResources = 10023
	// errCodeStorageExceeded: the account's storage limit.
	errCodeStorageExceeded = 10047
	// errCodeStoreFailed: the stream's store refused the write; its
	// description says why ("maximum bytes exceeded" at a stream's byte
	// limit, or the disk's error).
	errCodeStoreFailed = 10077
)

// Full reports whether err is a write refused for want of room: the
// server's store at max_file_store, a stream at its byte limit, a disk
// out of space. It is not Transient: repeating the write passes only once
// space is freed.
func Full(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources, errCodeStorageExceeded:
		return true
	case errCodeStoreFailed:
		d := strings.ToLower(apiErr.Description)
		return strings.Contains(d, "maximum bytes") || strings.Contains(d, "no space left") || strings.Contains(d, "insufficient")
	}
	return false
}

// Transient reports whether err is the transport's or the cluster's, and
// passes by itself: no responders, a timeout (a request to a stream with
// no leader yet is never answered), a connection reconnecting, no leader
// (503), too many requests in flight (429). Repeating the request is what
// to do.
func Transient(err error) bool {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrSlowConsumer),
		errors.Is(err, session.ErrUnavailable):
		return true
	case errors.As(err, &apiErr):
		return (apiErr.Code == 503 || apiErr.Code == 429) && !Full(err)
	}
	return false
}

// RecordKey says where a session of ctx's tenant has its record: its
// shard's bucket and the key in it.
func (s *Sessions) RecordKey(ctx context.Context, sid string) (bucket, key string, err error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return "", "", err
	}
	return RecordsBucket(w.sh.n), w.recKey(), nil
}

// maxCached bounds the records cached (a full cache starts again empty).
const maxCached = 100_000

func (s *Sessions) cached(w where) (record, bool) {
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	r, ok := s.cache[w.cacheKey()]
	return r, ok
}

// remember caches rec as the session's record (nil: forgets it).
func (s *Sessions) remember(w where, rec *record) {
	k := w.cacheKey()
	s.cacheMu.Lock()
	defer s.cacheMu.Unlock()
	if rec == nil {
		delete(s.cache, k)
		return
	}
	if len(s.cache) >= maxCached {
		clear(s.cache)
	}
	s.cache[k] = *rec
}

// SetCheckpointAge sets how old a session's stored record may grow while
// it is appended to (one minute by default): the idle sweep reads when a
// session was last written from it, so a deployment that deletes sessions
// idle for less than a few minutes sets it to a fraction of that.
func (s *Sessions) SetCheckpointAge(d time.Duration) { s.checkpointAge = d }
