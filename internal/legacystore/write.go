package legacystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

// item is one value of an atomic write.
type item struct {
	key    string
	value  []byte
	expect *uint64 // expected last revision of key (0: must not exist)
}

func rev(v uint64) *uint64 { return &v }

// apiError maps the error of a write's ack: a write that lost its
// compare-and-set, input the stream refuses whatever its health, a stream
// not provisioned for atomic writes; the codes are nats.go's names, or
// nats-server's where nats.go has none (the atomic batch's).
func apiError(ctx context.Context, what string, code, errCode int, desc string) error {
	switch ec := jetstream.ErrorCode(errCode); {
	case ec == jetstream.JSErrCodeStreamWrongLastSequence, ec == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return fmt.Errorf("%s: %w: %s", what, session.ErrConflict, desc)
	case ec == jetstream.JSErrCodeStreamMessageExceedsMaximum, errCode == int(server.JSAtomicPublishTooLargeBatchErrF):
		return fmt.Errorf("%s: %w: %s", what, session.ErrInvalid, desc)
	case errCode == int(server.JSAtomicPublishDisabledErr):
		return fmt.Errorf("%s: %s (provision the buckets: compactor provision)", what, desc)
	}
	// Anything else left the write unapplied (an atomic write applies
	// whole or not at all): the backend's trouble, and worth repeating.
	return unavailable(ctx, what, &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: desc})
}

// batch writes items atomically, each tagged with epoch, and returns the
// stream sequence of the last one. It returns session.ErrConflict when an
// expected revision did not hold; nothing is written then, nor on any other
// error.
func (s *Sessions) batch(ctx context.Context, epoch string, items []item) (uint64, error) {
	if len(items) > maxBatch {
		return 0, fmt.Errorf("%w: %d values in one atomic write, at most %d", session.ErrInvalid, len(items), maxBatch)
	}
	if s.failWrite != nil {
		if err := s.failWrite(items[len(items)-1].key); err != nil {
			return 0, err
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	// JetStream keeps at most 50 atomic batches open per stream (more
	// are refused with 429): this process keeps under that; other
	// replicas' batches may still crowd it, and a refusal is retried.
	select {
	case s.batches <- struct{}{}:
		defer func() { <-s.batches }()
	case <-ctx.Done():
		return 0, unavailable(ctx, "atomic write", ctx.Err())
	}
	id := uuid.NewString()
	for i, it := range items {
		m := nats.NewMsg(subject(SessionsBucket, it.key))
		m.Data = it.value
		m.Header.Set("Nats-Batch-Id", id)
		m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
		if epoch != "" {
			m.Header.Set(hdrEpoch, epoch)
		}
		if it.expect != nil {
			m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(*it.expect, 10))
		}
		last := i == len(items)-1
		if last {
			m.Header.Set("Nats-Batch-Commit", "1")
		}
		if i > 0 && !last {
			if err := s.nc.PublishMsg(m); err != nil {
				return 0, unavailable(ctx, "atomic write", err)
			}
			continue
		}
		reply, err := s.nc.RequestMsgWithContext(ctx, m)
		if err != nil {
			return 0, unavailable(ctx, "atomic write", err)
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
			Seq   uint64 `json:"seq"`
			Count int    `json:"count"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return 0, unavailable(ctx, "atomic write", fmt.Errorf("ack %q: %w", reply.Data, err))
		}
		if ack.Error != nil {
			return 0, apiError(ctx, "atomic write", ack.Error.Code, ack.Error.ErrCode, ack.Error.Desc)
		}
		if last && ack.Count != len(items) {
			return 0, fmt.Errorf("atomic write committed %d of %d values", ack.Count, len(items))
		}
		if last {
			return ack.Seq, nil
		}
	}
	return 0, errors.New("atomic write of nothing")
}

// put writes one value, tagged with epoch, with an expected revision when
// expect is set, and returns its revision.
func (s *Sessions) put(ctx context.Context, key string, data []byte, expect *uint64, epoch string) (uint64, error) {
	return s.putWith(ctx, key, data, expect, epoch, nil)
}

// putWith is put with more headers.
func (s *Sessions) putWith(ctx context.Context, key string, data []byte, expect *uint64, epoch string, hdr map[string]string) (uint64, error) {
	if s.failWrite != nil {
		if err := s.failWrite(key); err != nil {
			return 0, err
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m := nats.NewMsg(subject(SessionsBucket, key))
	m.Data = data
	for k, v := range hdr {
		m.Header.Set(k, v)
	}
	if epoch != "" {
		m.Header.Set(hdrEpoch, epoch)
	}
	if expect != nil {
		m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(*expect, 10))
	}
	ack, err := s.js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return 0, apiError(ctx, "write "+key, apiErr.Code, int(apiErr.ErrorCode), apiErr.Description)
	}
	if err != nil {
		return 0, unavailable(ctx, "write "+key, err)
	}
	return ack.Sequence, nil
}

// messageItems are the values of message m (its seq and id set): the
// message, or a stub and its chunks when it is over one value, and its id's
// index entry, which must not exist yet.
func (s *Sessions) messageItems(sid string, m *session.Message) ([]item, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: message %s: %v", session.ErrInvalid, m.ID, err)
	}
	if len(b) > MaxMessageBytes {
		return nil, fmt.Errorf("%w: message %s is %d bytes as JSON, over %d", session.ErrInvalid, m.ID, len(b), MaxMessageBytes)
	}
	index := item{key: indexKey(sid, m.ID), value: []byte(strconv.FormatInt(m.Seq, 10)), expect: rev(0)}
	if len(b) <= s.chunk {
		return []item{{key: msgKey(sid, m.Seq), value: b}, index}, nil
	}
	sum := sha256.Sum256(b)
	ref := blobRef{Bytes: len(b), SHA256: hex.EncodeToString(sum[:])}
	var out []item
	for n := 0; len(b) > 0; n++ {
		c := min(len(b), s.chunk)
		out = append(out, item{key: chunkKey(sid, m.Seq, n), value: b[:c]})
		b = b[c:]
		ref.Chunks++
	}
	stub, _ := json.Marshal(stored{Message: session.Message{ID: m.ID, Seq: m.Seq, Role: m.Role, Tokens: m.Tokens, ToolCallID: m.ToolCallID}, Blob: &ref})
	return append(out, item{key: msgKey(sid, m.Seq), value: stub}, index), nil
}

// Create stores a new session with its first messages, all at once or not
// at all: one atomic write, or, for a session too large for one, a record
// marked pending (invisible) completed by further writes. A create repeated
// with the same content (CreateDigest) succeeds and answers the session
// (resuming a pending one); with other content it returns
// session.ErrExists. Messages without an id get one derived from the
// content, so a repeated create writes the same ids. session.ErrInvalid is
// returned for a bad id or message.
func (s *Sessions) Create(ctx context.Context, rec session.Record, msgs []session.Message) (session.Record, error) {
	sid := rec.SessionID
	if err := checkID(sid); err != nil {
		return session.Record{}, err
	}
	if rec.ContextLimit < 0 {
		return session.Record{}, fmt.Errorf("%w: context_limit must be >= 0", session.ErrInvalid)
	}
	digest := session.CreateDigest(rec, msgs)
	prepared, err := session.Prepare(msgs, 0, func(i int) string { return session.CreatedMessageID(sid, digest, i) })
	if err != nil {
		return session.Record{}, err
	}
	if err := session.CheckConversation(prepared); err != nil {
		return session.Record{}, err
	}
	groups := make([][]item, len(prepared))
	for i := range prepared {
		if groups[i], err = s.messageItems(sid, &prepared[i]); err != nil {
			return session.Record{}, fmt.Errorf("message %d: %w", i, err)
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := s.rawRecord(ctx, sid)
		var next session.Record
		var base uint64
		switch {
		case errors.Is(err, session.ErrNotFound):
			now := s.now().UTC()
			next = session.Record{SessionID: sid, Model: rec.Model, ContextLimit: rec.ContextLimit, CreatedAt: now, UpdatedAt: now,
				Epoch: uuid.NewString(), CreateDigest: digest}
		case err != nil:
			return session.Record{}, err
		case cur.Deleted: // a delete under way: finish it first
			if err := s.purge(ctx, sid); err != nil {
				return session.Record{}, err
			}
			continue
		case cur.CreateDigest != digest:
			return session.Record{}, fmt.Errorf("session %s: %w with other content", sid, session.ErrExists)
		case !cur.Pending:
			return cur, nil // a repeated create
		default: // a create of this content stopped half-way: finish it
			next, base = cur, cur.Revision
		}
		done, err := s.writeCreate(ctx, next, groups, base)
		if errors.Is(err, session.ErrConflict) {
			if _, rerr := s.rawRecord(ctx, sid); errors.Is(rerr, session.ErrNotFound) {
				// Values without a record: what an interrupted delete, or
				// a create by an older version, left. They are nobody's.
				if err := s.purge(ctx, sid); err != nil {
					return session.Record{}, err
				}
			}
			continue // another create, or a delete, came first: look again
		}
		if err != nil {
			if done.Pending && done.Revision > 0 {
				// Part of a large create was written: take it back, so a
				// failed create leaves nothing (if this fails too, the
				// pending record stays invisible, and a repeated create
				// finishes it).
				_ = s.deleteAt(context.WithoutCancel(ctx), done)
			}
			return session.Record{}, err
		}
		return done, nil
	}
	return session.Record{}, fmt.Errorf("create %s: %w: it kept changing", sid, session.ErrConflict)
}

// writeCreate writes r's messages from its head on, in atomic writes of at
// most maxBatch values each with the record (expected at revision base,
// 0: absent), pending until the last. It returns the record as last
// written (Revision 0 when nothing was).
func (s *Sessions) writeCreate(ctx context.Context, r session.Record, groups [][]item, base uint64) (session.Record, error) {
	from := int(r.HeadSeq)
	r.Revision = base
	for {
		var items []item
		to := from
		for to < len(groups) && len(items)+len(groups[to])+1 <= maxBatch {
			items = append(items, groups[to]...)
			to++
		}
		if to == from && to < len(groups) {
			return r, fmt.Errorf("%w: message %d needs %d values, over one atomic write", session.ErrInvalid, to, len(groups[to]))
		}
		next := r
		next.HeadSeq, next.Pending, next.UpdatedAt = int64(to), to < len(groups), s.now().UTC()
		b, _ := json.Marshal(next)
		seq, err := s.batch(ctx, r.Epoch, append(items, item{key: recKey(r.SessionID), value: b, expect: rev(r.Revision)}))
		if err != nil {
			return r, err
		}
		next.Revision = seq
		r, from = next, to
		if !r.Pending {
			return r, nil
		}
	}
}

// Append adds messages at the session's head; see AppendWith.
func (s *Sessions) Append(ctx context.Context, sid string, msgs ...session.Message) ([]session.Message, error) {
	a, err := s.AppendWith(ctx, sid, msgs, session.AppendOptions{})
	return a.Messages, err
}

// AppendWith adds messages at the session's head in one atomic write with
// the record, retrying on a lost race with another append or a commit. A
// message whose id the session holds already is not written again: it is
// answered with its stored seq (so a retried append is applied once). With
// opt.ExpectedHeadSeq set, the append applies only at that head.
func (s *Sessions) AppendWith(ctx context.Context, sid string, msgs []session.Message, opt session.AppendOptions) (session.Appended, error) {
	if err := checkID(sid); err != nil {
		return session.Appended{}, err
	}
	if len(msgs) == 0 {
		return session.Appended{}, fmt.Errorf("%w: an append needs messages", session.ErrInvalid)
	}
	// Ids are given once: every attempt below writes the same ones.
	prepared, err := session.Prepare(msgs, 0, func(int) string { return uuid.NewString() })
	if err != nil {
		return session.Appended{}, err
	}
	ids := make([]string, len(prepared))
	for i := range prepared {
		ids[i] = prepared[i].ID
	}
	leader := false
	for attempt := 0; attempt < casRetries; attempt++ {
		rec, err := s.record(ctx, sid)
		if err != nil {
			return session.Appended{}, err
		}
		have, err := s.lookupIDs(ctx, sid, rec.Epoch, ids, leader)
		if err != nil {
			return session.Appended{}, err
		}
		out := session.Appended{Messages: slices.Clone(prepared), New: make([]bool, len(prepared)), HeadSeq: rec.HeadSeq}
		var items []item
		head := rec.HeadSeq
		for i := range out.Messages {
			m := &out.Messages[i]
			if seq, ok := have[m.ID]; ok {
				m.Seq = seq
				continue
			}
			head++
			m.Seq, out.New[i] = head, true
			its, err := s.messageItems(sid, m)
			if err != nil {
				return session.Appended{}, fmt.Errorf("message %d: %w", i, err)
			}
			items = append(items, its...)
		}
		if err := s.checkRepeats(ctx, rec, out); err != nil {
			return session.Appended{}, err
		}
		if head == rec.HeadSeq {
			return out, nil // every message is stored already
		}
		err = session.CheckToolResults(out.Messages, func(i int) bool { return out.New[i] }, func() (*session.Message, []string, error) {
			last, err := s.lastNonTool(ctx, rec)
			return last, nil, err // the first layout does not track open calls
		})
		if err != nil {
			return session.Appended{}, err
		}
		if opt.ExpectedHeadSeq != nil && *opt.ExpectedHeadSeq != rec.HeadSeq {
			return session.Appended{}, &session.HeadMovedError{Expected: *opt.ExpectedHeadSeq, Head: rec.HeadSeq}
		}
		if len(items)+1 > maxBatch {
			return session.Appended{}, fmt.Errorf("%w: the append needs %d values, over one atomic write (%d): send fewer messages at once", session.ErrInvalid, len(items)+1, maxBatch)
		}
		base := rec.Revision
		rec.HeadSeq, rec.UpdatedAt = head, s.now().UTC()
		b, _ := json.Marshal(rec)
		_, err = s.batch(ctx, rec.Epoch, append(items, item{key: recKey(sid), value: b, expect: rev(base)}))
		if err == nil {
			out.HeadSeq = head
			return out, nil
		}
		if !errors.Is(err, session.ErrConflict) {
			return session.Appended{}, err
		}
		// Another writer came first, or an id's entry exists that a
		// replica did not show: look again, at the leader.
		leader = true
	}
	return session.Appended{}, fmt.Errorf("append to %s: %w after %d tries", sid, session.ErrConflict, casRetries)
}

// checkRepeats compares each message of an append whose id the session
// holds with the stored one: another content under the id is an
// *session.IDTakenError (the append is refused whole), the same is a
// repeat. Only repeats pay for the read.
func (s *Sessions) checkRepeats(ctx context.Context, rec session.Record, a session.Appended) error {
	var seqs []int64
	var at []int
	for i, isNew := range a.New {
		if !isNew {
			seqs, at = append(seqs, a.Messages[i].Seq), append(at, i)
		}
	}
	if len(seqs) == 0 {
		return nil
	}
	stored, err := s.messages(ctx, rec, seqs)
	if err != nil {
		return err
	}
	for j, i := range at {
		if m := &a.Messages[i]; !m.SameAs(&stored[j]) {
			return &session.IDTakenError{ID: m.ID, Seq: m.Seq}
		}
	}
	return nil
}

// lastNonTool returns the session's latest message that is not a tool
// result (nil when there is none), reading back from the head in windows
// that double from 2 (the call is usually the message before, or a few
// results back); large tool results are passed over without reading their
// chunks.
func (s *Sessions) lastNonTool(ctx context.Context, rec session.Record) (*session.Message, error) {
	window := int64(2)
	for to := rec.HeadSeq; to >= 1; to, window = to-window, min(2*window, 64) {
		seqs := seqRange(max(1, to-window+1), to)
		msgs, refs, err := s.readMessages(ctx, rec, seqs, false)
		if err != nil {
			return nil, err
		}
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == session.RoleTool {
				continue
			}
			if ref := refs[i]; ref != nil {
				m, err := s.blob(ctx, rec, seqs[i], ref)
				return &m, err
			}
			return &msgs[i], nil
		}
	}
	return nil, nil
}

// Commit implements pipeline.SessionStore: the compaction message (created
// under its id; an existing one is fine, and reported), then the record
// with compare-and-set: the commit point. Stored messages are never
// rewritten: which compaction summarised a message follows from the
// record's compaction chain (History fills summarised_by from it). A head
// that moved (an append) is merged; a compaction that moved is
// session.ErrConflict. A crash between the message and the record leaves a
// compaction the pipeline finishes on the next request for the same key.
// (Two plain writes: an atomic batch on an R1 file stream stages on disk
// and costs about 100 times a write, and the record write is the only one
// that must be atomic.)
func (s *Sessions) Commit(ctx context.Context, c session.Commit) (existed bool, err error) {
	if err := checkID(c.SessionID); err != nil {
		return false, err
	}
	id := c.Compaction.ID
	created := false
	for attempt := 0; attempt < casRetries; attempt++ {
		var rec session.Record
		if attempt == 0 && c.Base != nil && c.Base.SessionID == c.SessionID && c.Base.Revision > 0 {
			rec = *c.Base // planned on it: try it; a stale one only costs a retry
		} else if rec, err = s.record(ctx, c.SessionID); err != nil {
			if created && errors.Is(err, session.ErrNotFound) {
				// Deleted meanwhile: take back what this commit wrote.
				_ = s.purgeKey(context.WithoutCancel(ctx), compKey(c.SessionID, id))
			}
			return existed, err
		}
		if rec.CompactionID != c.PrevCompactionID {
			return existed, fmt.Errorf("session %s moved from compaction %q to %q: %w", c.SessionID, c.PrevCompactionID, rec.CompactionID, session.ErrConflict)
		}
		if c.TailStartSeq < 1 || c.TailStartSeq > rec.HeadSeq+1 {
			return existed, fmt.Errorf("%w: tail start seq %d outside 1..%d", session.ErrInvalid, c.TailStartSeq, rec.HeadSeq+1)
		}
		if !created {
			b, _ := json.Marshal(c.Compaction)
			_, err := s.put(ctx, compKey(c.SessionID, id), b, rev(0), rec.Epoch)
			switch {
			case errors.Is(err, session.ErrConflict):
				existed = true
			case err != nil:
				return false, fmt.Errorf("write compaction %s: %w", id, err)
			}
			created = true
		}
		base := rec.Revision
		rec.PinnedSeqs = slices.Clone(c.Pinned)
		rec.TailStartID, rec.TailStartSeq, rec.CompactionID = c.TailStartID, c.TailStartSeq, id
		rec.Compactions++
		rec.UpdatedAt = c.Now
		b, _ := json.Marshal(rec)
		_, err := s.put(ctx, recKey(c.SessionID), b, rev(base), "")
		if err == nil {
			return existed, nil
		}
		if !errors.Is(err, session.ErrConflict) {
			return existed, fmt.Errorf("commit compaction %s: %w", id, err)
		}
	}
	return existed, fmt.Errorf("commit to %s: %w after %d tries", c.SessionID, session.ErrConflict, casRetries)
}

// Delete removes every value of the session: its record, messages, chunks,
// id index and compactions. Deleting a session that does not exist is not
// an error, so a repeated delete answers the same. The record is first
// marked deleted (compare-and-set), so no write racing the delete applies
// after it; then the session's subjects are purged.
func (s *Sessions) Delete(ctx context.Context, sid string) error {
	if err := checkID(sid); err != nil {
		return err
	}
	for range casRetries {
		rec, err := s.rawRecord(ctx, sid)
		if errors.Is(err, session.ErrNotFound) {
			return s.purge(ctx, sid) // what a failed create or delete may have left
		}
		if errors.Is(err, session.ErrCorrupt) {
			return s.purge(ctx, sid)
		}
		if err != nil {
			return err
		}
		if err := s.deleteAt(ctx, rec); !errors.Is(err, session.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("delete %s: %w: it kept changing", sid, session.ErrConflict)
}

// deleteAt deletes the session if its record is still rec (its revision):
// session.ErrConflict when it moved.
func (s *Sessions) deleteAt(ctx context.Context, rec session.Record) error {
	if !rec.Deleted {
		rec.Deleted, rec.UpdatedAt = true, s.now().UTC()
		b, _ := json.Marshal(rec)
		if _, err := s.put(ctx, recKey(rec.SessionID), b, rev(rec.Revision), ""); err != nil {
			return err
		}
	}
	return s.purge(ctx, rec.SessionID)
}

// purge removes every value under the session's keys from the stream
// (no delete markers are left: the keys are as if never written).
func (s *Sessions) purge(ctx context.Context, sid string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject(SessionsBucket, sid+".>"))); err != nil {
		return unavailable(ctx, "delete session "+sid, err)
	}
	return nil
}

func (s *Sessions) purgeKey(ctx context.Context, key string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	return s.stream.Purge(ctx, jetstream.WithPurgeSubject(subject(SessionsBucket, key)))
}

// Sweep deletes the sessions nobody wrote to within ttl (their record's
// updated_at; a create left pending that long too) and returns their ids.
// A session written to meanwhile is kept: the delete is a compare-and-set
// on the record read from the leader.
func (s *Sessions) Sweep(ctx context.Context, ttl time.Duration) ([]string, error) {
	if ttl <= 0 {
		return nil, nil
	}
	lister, err := s.kv.ListKeysFiltered(ctx, "*.rec")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, unavailable(ctx, "list sessions", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	vals, err := s.getMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	cutoff := s.now().Add(-ttl)
	var deleted []string
	for k, v := range vals {
		var r session.Record
		if json.Unmarshal(v.data, &r) != nil || !r.UpdatedAt.Before(cutoff) {
			continue // a record that does not decode is an operator's to look at
		}
		sid := k[:len(k)-len(".rec")]
		r, err := s.rawRecord(ctx, sid) // the latest, from the leader
		if errors.Is(err, session.ErrNotFound) {
			continue
		}
		if err != nil {
			return deleted, err
		}
		if !r.UpdatedAt.Before(cutoff) && !r.Deleted {
			continue
		}
		switch err := s.deleteAt(ctx, r); {
		case err == nil:
			deleted = append(deleted, sid)
		case errors.Is(err, session.ErrConflict): // written to meanwhile
		default:
			return deleted, err
		}
	}
	return deleted, nil
}
