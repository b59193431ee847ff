// Package kvstore keeps sessions and circuit breakers in JetStream KV
// buckets, behind the pipeline's store interfaces.
//
// Layout of the sessions bucket, one value per key so that no value nears
// max_payload whatever the session's size: "<sid>.rec" (the record),
// "<sid>.m.<seq>" (one message each, seq zero-padded), "<sid>.c.<id>"
// (compaction messages, append-only). An append (messages + record) is one
// JetStream atomic batch whose record write carries the expected revision,
// so it applies whole or not at all and loses no concurrent write. A
// compaction's commit writes its message, then the record with
// compare-and-set: the record is the commit point, and a message written
// without it is finished by the pipeline on the next request.
package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

// Bucket names (SPEC §8).
const (
	SessionsBucket = "sessions"
	BreakersBucket = "compaction_breakers"
)

var (
	_ pipeline.SessionStore = (*Sessions)(nil)
	_ pipeline.BreakerStore = (*Breakers)(nil)
)

// maxBatch is JetStream's limit of messages in one atomic batch, less the
// record.
const maxBatch = 999

// casRetries bounds re-reads after a lost compare-and-set.
const casRetries = 50

var validID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

func checkID(id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("%w: session id %q must be 1-200 letters, digits, '-' or '_'", session.ErrInvalid, id)
	}
	return nil
}

func recKey(sid string) string            { return sid + ".rec" }
func msgKey(sid string, seq int64) string { return fmt.Sprintf("%s.m.%012d", sid, seq) }
func compKey(sid, id string) string       { return sid + ".c." + id }
func subject(bucket, key string) string   { return "$KV." + bucket + "." + key }
func isNotFound(err error) bool           { return errors.Is(err, jetstream.ErrKeyNotFound) }
func notFound(what string, err error) error {
	return fmt.Errorf("%s: %w (%v)", what, session.ErrNotFound, err)
}

// Provision creates the buckets if they are missing, or updates their
// replicas, and enables atomic batches on the sessions bucket (idempotent).
// It reads first and writes only what differs, so a service whose user may
// only read stream info starts against buckets an administrator made.
func Provision(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if replicas < 1 {
		replicas = 1
	}
	for _, b := range []string{SessionsBucket, BreakersBucket} {
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
	nc  *nats.Conn
	kv  jetstream.KeyValue
	now func() time.Time
}

// NewSessions binds the provisioned sessions bucket.
func NewSessions(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*Sessions, error) {
	kv, err := js.KeyValue(ctx, SessionsBucket)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", SessionsBucket, err)
	}
	return &Sessions{nc: nc, kv: kv, now: time.Now}, nil
}

type item struct {
	key    string
	value  []byte
	expect *uint64 // expected last revision of key (0: must not exist)
}

// batch writes items atomically. It returns session.ErrConflict when an
// expected revision did not hold (nothing is written then).
func (s *Sessions) batch(ctx context.Context, items []item) error {
	id := uuid.NewString()
	for i, it := range items {
		m := nats.NewMsg(subject(SessionsBucket, it.key))
		m.Data = it.value
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", fmt.Sprint(i+1))
		if it.expect != nil {
			m.Header.Set("Nats-Expected-Last-Subject-Sequence", fmt.Sprint(*it.expect))
		}
		last := i == len(items)-1
		if last {
			m.Header.Set("Nats-Batch-Commit", "1")
		}
		if i > 0 && !last {
			if err := s.nc.PublishMsg(m); err != nil {
				return fmt.Errorf("batch publish: %w", err)
			}
			continue
		}
		reply, err := s.nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return fmt.Errorf("batch publish: %w", err)
		}
		if len(reply.Data) == 0 && !last {
			continue // the batch is open
		}
		var ack struct {
			Error *struct {
				Code    int    `json:"code"`
				ErrCode int    `json:"err_code"`
				Desc    string `json:"description"`
			} `json:"error"`
			Count int `json:"count"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return fmt.Errorf("batch ack %q: %w", reply.Data, err)
		}
		if ack.Error != nil {
			if ack.Error.ErrCode == 10071 || ack.Error.ErrCode == 10164 { // wrong last sequence
				return fmt.Errorf("%w: %s", session.ErrConflict, ack.Error.Desc)
			}
			return fmt.Errorf("batch rejected: %s (err_code %d)", ack.Error.Desc, ack.Error.ErrCode)
		}
		if last && ack.Count != len(items) {
			return fmt.Errorf("batch committed %d of %d messages", ack.Count, len(items))
		}
	}
	return nil
}

func (s *Sessions) record(ctx context.Context, sid string) (session.Record, error) {
	e, err := s.kv.Get(ctx, recKey(sid))
	if isNotFound(err) {
		return session.Record{}, notFound("session "+sid, err)
	}
	if err != nil {
		return session.Record{}, err
	}
	var r session.Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return session.Record{}, fmt.Errorf("session %s: bad record: %w", sid, err)
	}
	r.Revision = e.Revision()
	return r, nil
}

func rev(v uint64) *uint64 { return &v }

// Create stores a new session with its first messages. It returns
// session.ErrExists for a taken id and session.ErrInvalid for a bad id or
// message. Messages beyond one batch are appended in batches; each step
// leaves a consistent session.
func (s *Sessions) Create(ctx context.Context, rec session.Record, msgs []session.Message) (session.Record, error) {
	if err := checkID(rec.SessionID); err != nil {
		return session.Record{}, err
	}
	for i := range msgs {
		if err := msgs[i].Validate(); err != nil {
			return session.Record{}, fmt.Errorf("message %d: %w", i, err)
		}
	}
	now := s.now().UTC()
	rec.HeadSeq, rec.CreatedAt, rec.UpdatedAt = 0, now, now
	rec.PinnedSeqs, rec.TailStartID, rec.TailStartSeq, rec.CompactionID, rec.Compactions = nil, "", 0, "", 0
	b, _ := json.Marshal(rec)
	if err := s.batch(ctx, []item{{key: recKey(rec.SessionID), value: b, expect: rev(0)}}); err != nil {
		if errors.Is(err, session.ErrConflict) {
			return session.Record{}, fmt.Errorf("session %s: %w", rec.SessionID, session.ErrExists)
		}
		return session.Record{}, err
	}
	for len(msgs) > 0 {
		n := min(len(msgs), maxBatch)
		if _, err := s.Append(ctx, rec.SessionID, msgs[:n]...); err != nil {
			return session.Record{}, err
		}
		msgs = msgs[n:]
	}
	return s.record(ctx, rec.SessionID)
}

// Append adds messages at the session's head in one atomic batch with the
// record, retrying on a lost race with another append or a commit.
func (s *Sessions) Append(ctx context.Context, sid string, msgs ...session.Message) ([]session.Message, error) {
	if err := checkID(sid); err != nil {
		return nil, err
	}
	if len(msgs) > maxBatch {
		return nil, fmt.Errorf("%w: %d messages in one append, at most %d", session.ErrInvalid, len(msgs), maxBatch)
	}
	for i := range msgs {
		if err := msgs[i].Validate(); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	prepared := make([]session.Message, len(msgs))
	for i, m := range msgs {
		if m.ID == "" {
			m.ID = uuid.NewString()
		}
		m.IsCompaction, m.Compaction, m.SummarisedBy = false, nil, ""
		prepared[i] = m
	}
	for attempt := 0; attempt < casRetries; attempt++ {
		rec, err := s.record(ctx, sid)
		if err != nil {
			return nil, err
		}
		items := make([]item, 0, len(prepared)+1)
		for i := range prepared {
			prepared[i].Seq = rec.HeadSeq + int64(i) + 1
			b, _ := json.Marshal(prepared[i])
			items = append(items, item{key: msgKey(sid, prepared[i].Seq), value: b})
		}
		base := rec.Revision
		rec.HeadSeq += int64(len(prepared))
		rec.UpdatedAt = s.now().UTC()
		b, _ := json.Marshal(rec)
		items = append(items, item{key: recKey(sid), value: b, expect: rev(base)})
		err = s.batch(ctx, items)
		if err == nil {
			return slices.Clone(prepared), nil
		}
		if !errors.Is(err, session.ErrConflict) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("append to %s: %w after %d tries", sid, session.ErrConflict, casRetries)
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for seq := from; seq <= to; seq++ {
		out = append(out, seq)
	}
	return out
}

// Load implements pipeline.SessionStore; it reads the record, the pinned
// messages and the tail (and, with history, the summarised messages).
func (s *Sessions) Load(ctx context.Context, sid string, history bool) (*session.Session, error) {
	if err := checkID(sid); err != nil {
		return nil, notFound("session "+sid, err)
	}
	rec, err := s.record(ctx, sid)
	if err != nil {
		return nil, err
	}
	out := &session.Session{Record: rec}
	if rec.CompactionID == "" {
		out.Messages, err = s.messages(ctx, sid, seqRange(1, rec.HeadSeq))
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	c, err := s.Compaction(ctx, sid, rec.CompactionID)
	if err != nil {
		return nil, err
	}
	out.Summary = c
	pinned := map[int64]bool{}
	for _, seq := range rec.PinnedSeqs {
		pinned[seq] = true
	}
	seqs := slices.Clone(rec.PinnedSeqs)
	seqs = append(seqs, seqRange(rec.TailStartSeq, rec.HeadSeq)...)
	if out.Messages, err = s.messages(ctx, sid, seqs); err != nil {
		return nil, err
	}
	if history {
		var old []int64
		for seq := int64(1); seq < rec.TailStartSeq; seq++ {
			if !pinned[seq] {
				old = append(old, seq)
			}
		}
		if out.Summarised, err = s.messages(ctx, sid, old); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Compaction implements pipeline.SessionStore.
func (s *Sessions) Compaction(ctx context.Context, sid, id string) (*session.Message, error) {
	e, err := s.kv.Get(ctx, compKey(sid, id))
	if isNotFound(err) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, notFound("compaction "+id, err)
	}
	if err != nil {
		return nil, err
	}
	var m session.Message
	if err := json.Unmarshal(e.Value(), &m); err != nil {
		return nil, fmt.Errorf("compaction %s: %w", id, err)
	}
	return &m, nil
}

// Commit implements pipeline.SessionStore: the compaction message (created
// under its id; an existing one is fine), then the record with
// compare-and-set: the commit point. Stored messages are never rewritten:
// which compaction summarised a message follows from the record's
// compaction chain (History fills summarised_by from it). A head that
// moved (an append) is merged; a compaction that moved is
// session.ErrConflict. A crash between the message and the record
// leaves a compaction the pipeline finishes on the next request for the
// same key. (Two plain writes: an atomic batch on an R1 file stream stages
// on disk and costs about 100 times a write, and the record write is the
// only one that must be atomic.)
func (s *Sessions) Commit(ctx context.Context, c session.Commit) error {
	if err := checkID(c.SessionID); err != nil {
		return err
	}
	id := c.Compaction.ID
	created := false
	for attempt := 0; attempt < casRetries; attempt++ {
		var rec session.Record
		if attempt == 0 && c.Base != nil && c.Base.SessionID == c.SessionID && c.Base.Revision > 0 {
			rec = *c.Base // planned on it: try it; a stale one only costs a retry
		} else {
			var err error
			if rec, err = s.record(ctx, c.SessionID); err != nil {
				return err
			}
		}
		if rec.CompactionID != c.PrevCompactionID {
			return fmt.Errorf("session %s moved from compaction %q to %q: %w", c.SessionID, c.PrevCompactionID, rec.CompactionID, session.ErrConflict)
		}
		if c.TailStartSeq < 1 || c.TailStartSeq > rec.HeadSeq+1 {
			return fmt.Errorf("%w: tail start seq %d outside 1..%d", session.ErrInvalid, c.TailStartSeq, rec.HeadSeq+1)
		}
		if !created {
			b, _ := json.Marshal(c.Compaction)
			if _, err := s.kv.Create(ctx, compKey(c.SessionID, id), b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return fmt.Errorf("write compaction %s: %w", id, err)
			}
			created = true
		}
		base := rec.Revision
		rec.PinnedSeqs = slices.Clone(c.Pinned)
		rec.TailStartID, rec.TailStartSeq, rec.CompactionID = c.TailStartID, c.TailStartSeq, id
		rec.Compactions++
		rec.UpdatedAt = c.Now
		b, _ := json.Marshal(rec)
		_, err := s.kv.Update(ctx, recKey(c.SessionID), b, base)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("commit compaction %s: %w", id, err)
		}
	}
	return fmt.Errorf("commit to %s: %w after %d tries", c.SessionID, session.ErrConflict, casRetries)
}

// Record returns the session's record.
func (s *Sessions) Record(ctx context.Context, sid string) (session.Record, error) {
	if err := checkID(sid); err != nil {
		return session.Record{}, notFound("session "+sid, err)
	}
	return s.record(ctx, sid)
}

// History returns every message and every committed compaction of a
// session (the record's chain, oldest first). Each message a compaction
// covers has summarised_by set to it; a compaction message written by a
// writer that then lost its commit is neither listed nor marks anything.
func (s *Sessions) History(ctx context.Context, sid string) ([]session.Message, []session.Message, error) {
	rec, err := s.Record(ctx, sid)
	if err != nil {
		return nil, nil, err
	}
	msgs, err := s.messages(ctx, sid, seqRange(1, rec.HeadSeq))
	if err != nil {
		return nil, nil, err
	}
	lister, err := s.kv.ListKeysFiltered(ctx, sid+".c.*")
	if err != nil {
		return nil, nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	vals, err := s.getMany(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*session.Message, len(vals))
	for _, k := range keys {
		v, ok := vals[k]
		if !ok {
			continue
		}
		var m session.Message
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, nil, fmt.Errorf("compaction %s: %w", k, err)
		}
		byID[m.ID] = &m
	}
	pinned := map[int64]bool{}
	for _, seq := range rec.PinnedSeqs {
		pinned[seq] = true
	}
	// The committed compactions are the record's chain; one written by a
	// writer that then lost its commit is not part of the history.
	var comps []session.Message
	for id := rec.CompactionID; id != "" && len(comps) <= len(byID); {
		c := byID[id]
		if c == nil || c.Compaction == nil {
			break
		}
		for seq := c.Compaction.FromSeq; seq <= c.Compaction.ToSeq && seq <= int64(len(msgs)); seq++ {
			if seq >= 1 && !pinned[seq] {
				msgs[seq-1].SummarisedBy = id
			}
		}
		comps = append(comps, *c)
		id = c.Compaction.Previous
	}
	slices.Reverse(comps) // oldest first
	return msgs, comps, nil
}
