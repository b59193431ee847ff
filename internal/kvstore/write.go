package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

// apiError maps the error of a write's ack: a write that lost its
// compare-and-set, input the stream refuses whatever its health; the codes
// are nats.go's names.
func apiError(ctx context.Context, what string, code, errCode int, desc string) error {
	switch ec := jetstream.ErrorCode(errCode); {
	case ec == jetstream.JSErrCodeStreamWrongLastSequence, ec == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return fmt.Errorf("%s: %w: %s", what, session.ErrConflict, desc)
	case ec == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return fmt.Errorf("%s: %w: %s", what, session.ErrInvalid, desc)
	}
	// Anything else left the write unapplied: the backend's trouble, and
	// worth repeating.
	return unavailable(ctx, what, &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: desc})
}

// write is one stream message to publish.
type write struct {
	subject string
	data    []byte
	epoch   string
	// expect is the subject's expected last sequence (0: none on it).
	expect *uint64
	// msgID is a Nats-Msg-Id (the stream answers a repeat within its
	// duplicate window as a duplicate of the first).
	msgID  string
	rollup bool
	hdr    map[string]string
}

func expect(seq uint64) *uint64 { return &seq }

// publish writes w and returns its stream sequence, and whether the
// stream found it a duplicate (of the one at that sequence).
func (s *Sessions) publish(ctx context.Context, w write) (uint64, bool, error) {
	if s.failWrite != nil {
		if err := s.failWrite(w.subject); err != nil {
			return 0, false, err
		}
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	m := nats.NewMsg(w.subject)
	m.Data = w.data
	for k, v := range w.hdr {
		m.Header.Set(k, v)
	}
	if w.epoch != "" {
		m.Header.Set(hdrEpoch, w.epoch)
	}
	if w.expect != nil {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(*w.expect, 10))
	}
	if w.msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, w.msgID)
	}
	if w.rollup {
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	}
	ack, err := s.js.PublishMsg(ctx, m)
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		err = apiError(ctx, "write "+w.subject, apiErr.Code, int(apiErr.ErrorCode), apiErr.Description)
	case err != nil:
		err = unavailable(ctx, "write "+w.subject, err)
	}
	s.wrote(err)
	if err != nil {
		return 0, false, err
	}
	return ack.Sequence, ack.Duplicate, nil
}

// putRecord writes rec with compare-and-set on revision base (0: it must
// not exist) and returns its new revision.
func (s *Sessions) putRecord(ctx context.Context, w where, rec *record, base uint64) (uint64, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("%w: record: %v", session.ErrInvalid, err)
	}
	seq, _, err := s.publish(ctx, write{subject: w.recSubject(), data: b, expect: expect(base)})
	return seq, err
}

// writeEntry writes msgs (the session's next messages, seqs and ids set)
// as one log entry after the entry at stream sequence after: their large
// messages' chunks first, then the entry, expecting after as the log's
// last. It returns the entry's stream sequence; session.ErrConflict when
// the log has moved past after.
func (s *Sessions) writeEntry(ctx context.Context, w where, epoch string, after uint64, msgs []session.Message) (uint64, error) {
	e, chunks, whole, err := s.encodeEntry(msgs)
	if err != nil {
		return 0, err
	}
	for i, cs := range chunks {
		for _, c := range cs {
			seq, _, err := s.publish(ctx, write{subject: w.subject("b"), data: c, epoch: epoch})
			if err != nil {
				return 0, err
			}
			e.Msgs[i].Blob.Seqs = append(e.Msgs[i].Blob.Seqs, seq)
		}
	}
	b := marshalEntry(e, whole)
	seq, _, err := s.publish(ctx, write{subject: w.subject("log"), data: b, epoch: epoch, expect: expect(after)})
	return seq, err
}

// adopt reads the log's entries past the record's (written by an append
// that stopped before its record, or racing this one) from the leader and
// adds them to rec, which then says what the log holds. Entries of
// another epoch there are what a failed delete left before this
// incarnation wrote anything: purged when rec has no message yet, corrupt
// state otherwise.
func (s *Sessions) adopt(ctx context.Context, w where, rec *record) error {
	for range casRetries {
		r, err := s.leaderMsg(ctx, w.dataStream(), map[string]any{"seq": rec.Log.Seq + 1, "next_by_subj": w.subject("log")})
		if errors.Is(err, session.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if r.epoch() != rec.Epoch {
			if rec.HeadSeq == 0 {
				if err := s.purgeSubject(ctx, w.dataStream(), w.subject("log")); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("session %s: %w: log entry %d is of another incarnation", w.sid, session.ErrCorrupt, r.seq)
		}
		e, err := decodeEntry(r)
		if err != nil {
			return err
		}
		if e.First != rec.HeadSeq+1 {
			return fmt.Errorf("session %s: %w: log entry %d starts at message %d, after %d", w.sid, session.ErrCorrupt, r.seq, e.First, rec.HeadSeq)
		}
		e.addTo(rec, r.seq)
	}
	return fmt.Errorf("session %s: %w: the log kept growing", w.sid, session.ErrConflict)
}

// Create stores a new session with its first messages, all at once or not
// at all: a record marked pending (invisible) is written first, which
// makes this create the session's only writer, then the log entries, then
// the record with pending cleared. A create repeated with the same content
// (CreateDigest) succeeds and answers the session (finishing a pending
// one); with other content it returns session.ErrExists. Messages without
// an id get one derived from the content, so a repeated create writes the
// same ids. session.ErrInvalid is returned for a bad id or message.
func (s *Sessions) Create(ctx context.Context, in session.Record, msgs []session.Message) (session.Record, error) {
	w, err := s.where(ctx, in.SessionID)
	if err != nil {
		return session.Record{}, err
	}
	if in.ContextLimit < 0 {
		return session.Record{}, fmt.Errorf("%w: context_limit must be >= 0", session.ErrInvalid)
	}
	digest := session.CreateDigest(in, msgs)
	prepared, err := session.Prepare(msgs, 0, func(i int) string { return session.CreatedMessageID(w.sid, digest, i) })
	if err != nil {
		return session.Record{}, err
	}
	if err := session.CheckConversation(prepared); err != nil {
		return session.Record{}, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := s.rawRecord(ctx, w)
		switch {
		case errors.Is(err, session.ErrNotFound):
			now := s.now().UTC()
			cur = record{Record: session.Record{SessionID: w.sid, Model: in.Model, ContextLimit: in.ContextLimit, CreatedAt: now, UpdatedAt: now,
				Epoch: uuid.NewString(), CreateDigest: digest, Pending: true}}
			rev, err := s.putRecord(ctx, w, &cur, 0)
			if errors.Is(err, session.ErrConflict) {
				continue // another create came first: look again
			}
			if err != nil {
				return session.Record{}, err
			}
			cur.Revision = rev
		case err != nil:
			return session.Record{}, err
		case cur.Deleted: // a delete under way: finish it first
			if err := s.deleteAt(ctx, w, cur); err != nil && !errors.Is(err, session.ErrConflict) {
				return session.Record{}, err
			}
			continue
		case cur.CreateDigest != digest:
			return session.Record{}, fmt.Errorf("session %s: %w with other content", w.sid, session.ErrExists)
		case !cur.Pending:
			return cur.Record, nil // a repeated create
		}
		done, err := s.finishCreate(ctx, w, cur, prepared)
		if errors.Is(err, session.ErrConflict) {
			continue // another create of this content, or a delete, came first
		}
		if err != nil {
			// Take back what was written, so a failed create leaves
			// nothing (if this fails too, the pending record stays
			// invisible, and a repeated create finishes it).
			if now, rerr := s.rawRecord(context.WithoutCancel(ctx), w); rerr == nil && now.Pending && now.Epoch == cur.Epoch {
				_ = s.deleteAt(context.WithoutCancel(ctx), w, now)
			}
			return session.Record{}, err
		}
		return done.Record, nil
	}
	return session.Record{}, fmt.Errorf("create %s: %w: it kept changing", w.sid, session.ErrConflict)
}

// finishCreate writes the pending record's messages from what its log
// holds on, then clears pending.
func (s *Sessions) finishCreate(ctx context.Context, w where, rec record, msgs []session.Message) (record, error) {
	if err := s.writeAll(ctx, w, &rec, msgs); err != nil {
		return rec, err
	}
	base := rec.Revision
	rec.Pending, rec.UpdatedAt = false, s.now().UTC()
	rev, err := s.putRecord(ctx, w, &rec, base)
	if err != nil {
		return rec, err
	}
	rec.Revision = rev
	return rec, nil
}

// writeAll writes msgs (the session's messages from 1, seqs and ids set)
// from what the log holds on, in entries of at most one value each (a
// message larger than that alone, in chunks), and adds them to rec.
func (s *Sessions) writeAll(ctx context.Context, w where, rec *record, msgs []session.Message) error {
	if err := s.adopt(ctx, w, rec); err != nil {
		return err
	}
	sizes := make([]int, len(msgs))
	for i := range msgs {
		b, err := marshalMessage(&msgs[i])
		if err != nil {
			return fmt.Errorf("%w: message %d: %v", session.ErrInvalid, i, err)
		}
		sizes[i] = len(b) + 1
	}
	for from := int(rec.HeadSeq); from < len(msgs); {
		to, total := from+1, sizes[from]
		for to < len(msgs) && to-from < maxAppend && total+sizes[to] <= s.chunk-64 {
			total += sizes[to]
			to++
		}
		seq, err := s.writeEntry(ctx, w, rec.Epoch, rec.Log.Seq, msgs[from:to])
		if errors.Is(err, session.ErrConflict) {
			// Another writer of this create: take what it wrote.
			if err := s.adopt(ctx, w, rec); err != nil {
				return err
			}
			from = int(rec.HeadSeq)
			continue
		}
		if err != nil {
			return err
		}
		rec.add(seq, msgs[from:to])
		from = to
	}
	return nil
}

// Import writes a whole session as another store holds it (a migration):
// its record (epoch, compaction state and times kept), its messages (ids
// and seqs kept) and its committed compactions, oldest first, behind a
// pending record that the last write clears. It is idempotent: a session
// already imported (the same epoch) is left as it is and reported false;
// one whose import stopped half-way is taken back and written again. A
// session of the same id and another epoch is session.ErrExists.
func (s *Sessions) Import(ctx context.Context, in session.Record, msgs, comps []session.Message) (bool, error) {
	w, err := s.where(ctx, in.SessionID)
	if err != nil {
		return false, err
	}
	if in.Epoch == "" {
		return false, fmt.Errorf("%w: session %s: an imported session needs its epoch", session.ErrInvalid, in.SessionID)
	}
	msgs = slices.Clone(msgs)
	for i := range msgs {
		if msgs[i].Seq != int64(i+1) {
			return false, fmt.Errorf("%w: session %s: message %d has seq %d", session.ErrInvalid, in.SessionID, i+1, msgs[i].Seq)
		}
		msgs[i].SummarisedBy = "" // the chain says it
	}
	for range 3 {
		cur, err := s.rawRecord(ctx, w)
		switch {
		case errors.Is(err, session.ErrNotFound):
		case err != nil:
			return false, err
		case cur.Epoch != in.Epoch:
			return false, fmt.Errorf("session %s: %w in the sharded store (another incarnation)", in.SessionID, session.ErrExists)
		case cur.Visible():
			return false, nil // imported before
		default: // an import that stopped half-way: again, from nothing
			if err := s.deleteAt(ctx, w, cur); err != nil && !errors.Is(err, session.ErrConflict) {
				return false, err
			}
			continue
		}
		rec := record{Record: in}
		rec.HeadSeq, rec.Pending, rec.Deleted, rec.Revision = 0, true, false, 0
		rev, err := s.putRecord(ctx, w, &rec, 0)
		if errors.Is(err, session.ErrConflict) {
			continue
		}
		if err != nil {
			return false, err
		}
		rec.Revision = rev
		if err := s.writeAll(ctx, w, &rec, msgs); err != nil {
			return false, err
		}
		for _, c := range comps {
			b, _ := json.Marshal(c)
			seq, _, err := s.publish(ctx, write{subject: w.subject("c"), data: b, epoch: rec.Epoch, msgID: rec.Epoch + ":" + c.ID})
			if err != nil {
				return false, err
			}
			if c.ID == in.CompactionID {
				rec.Log.Compaction = seq
			}
		}
		if in.CompactionID != "" && rec.Log.Compaction == 0 {
			return false, fmt.Errorf("%w: session %s: its compaction %s is not among those given", session.ErrInvalid, in.SessionID, in.CompactionID)
		}
		if rec.HeadSeq != in.HeadSeq {
			return false, fmt.Errorf("%w: session %s: %d messages given for a head of %d", session.ErrInvalid, in.SessionID, rec.HeadSeq, in.HeadSeq)
		}
		base := rec.Revision
		rec.Pending = false
		if _, err := s.putRecord(ctx, w, &rec, base); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, fmt.Errorf("import %s: %w: it kept changing", in.SessionID, session.ErrConflict)
}

// Append adds messages at the session's head; see AppendWith.
func (s *Sessions) Append(ctx context.Context, sid string, msgs ...session.Message) ([]session.Message, error) {
	a, err := s.AppendWith(ctx, sid, msgs, session.AppendOptions{})
	return a.Messages, err
}

// AppendWith adds messages at the session's head: one log entry, written
// expecting the record's last entry, then the record with compare-and-set
// (an entry whose record write was lost is adopted by the next append). A
// message whose id is among the session's latest RecentIDs is not written
// again (it is answered with its stored seq, so a retried append is
// applied once) when it says the same as the stored one; with other
// content the whole append is refused (*session.IDTakenError). With
// opt.ExpectedHeadSeq set, the append applies only at that head.
func (s *Sessions) AppendWith(ctx context.Context, sid string, msgs []session.Message, opt session.AppendOptions) (session.Appended, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return session.Appended{}, err
	}
	prepared, err := prepareAppend(msgs)
	if err != nil {
		return session.Appended{}, err
	}
	unlock, err := s.appending.Lock(ctx, w.cacheKey())
	if err != nil {
		return session.Appended{}, err
	}
	defer unlock()
	// A cached record may be behind: the guarded write finds out, but
	// what is answered without writing is decided on a fresh one.
	rec, hit := s.cached(w)
	fresh := false
	if !hit || !rec.Visible() {
		if rec, err = s.current(ctx, w); err != nil {
			return session.Appended{}, err
		}
		fresh = true
	}
	return s.appendOn(ctx, w, rec, fresh, prepared, opt)
}

// appendOn is AppendWith's tries, from rec (fresh: read from the leader
// now, not this process's cache).
func (s *Sessions) appendOn(ctx context.Context, w where, rec record, fresh bool, prepared []session.Message, opt session.AppendOptions) (session.Appended, error) {
	reread := func() error {
		r, err := s.current(ctx, w)
		if err != nil {
			s.remember(w, nil)
			return err
		}
		rec, fresh = r, true
		return nil
	}
	for attempt := 0; attempt < casRetries; attempt++ {
		out, add, head := numbered(&rec, prepared)
		if !fresh && (len(add) < len(out.Messages) || opt.ExpectedHeadSeq != nil && *opt.ExpectedHeadSeq != rec.HeadSeq) {
			if err := reread(); err != nil {
				return session.Appended{}, err
			}
			continue
		}
		if err := s.checkRepeats(ctx, w, &rec, out); err != nil {
			return session.Appended{}, err
		}
		if head == rec.HeadSeq {
			out.Bytes = rec.Bytes
			return out, nil // every message is stored already
		}
		err := session.CheckToolResults(out.Messages, func(i int) bool { return out.New[i] }, func() (*session.Message, []string, error) {
			last, open := rec.lastNonTool()
			return last, open, nil
		})
		if err != nil {
			if fresh {
				return session.Appended{}, err
			}
			if err := reread(); err != nil {
				return session.Appended{}, err
			}
			continue
		}
		if opt.ExpectedHeadSeq != nil && *opt.ExpectedHeadSeq != rec.HeadSeq {
			return session.Appended{}, &session.HeadMovedError{Expected: *opt.ExpectedHeadSeq, Head: rec.HeadSeq}
		}
		seq, err := s.writeEntry(ctx, w, rec.Epoch, rec.Log.Seq, add)
		if errors.Is(err, session.ErrConflict) {
			// Another process's append came first: look again, after a
			// wait that keeps two such writers from meeting every time.
			if !backoff(ctx, attempt) {
				return session.Appended{}, ctx.Err()
			}
			if err := reread(); err != nil {
				return session.Appended{}, err
			}
			continue
		}
		if err != nil {
			s.remember(w, nil)
			return session.Appended{}, err
		}
		// The entry is the append: it is in the log, where every reader
		// rolls forward to. The record follows now and then.
		if out.Bytes, err = s.appended(ctx, w, rec, seq, add); err != nil {
			return session.Appended{}, err
		}
		out.HeadSeq = head
		return out, nil
	}
	return session.Appended{}, fmt.Errorf("append to %s: %w after %d tries", w.sid, session.ErrConflict, casRetries)
}

// prepareAppend checks an append's messages and gives ids to those
// without, once: every attempt writes the same ones.
func prepareAppend(msgs []session.Message) ([]session.Message, error) {
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%w: an append needs messages", session.ErrInvalid)
	}
	if len(msgs) > maxAppend {
		return nil, fmt.Errorf("%w: %d messages in one append, at most %d: send fewer at once", session.ErrInvalid, len(msgs), maxAppend)
	}
	return session.Prepare(msgs, 0, func(int) string { return uuid.NewString() })
}

// numbered is an append of prepared (ids given) to the session rec
// describes: each message the record's recent ids hold answered with its
// seq, the others numbered from the head on (add, to write), and the head
// after them.
func numbered(rec *record, prepared []session.Message) (out session.Appended, add []session.Message, head int64) {
	out = session.Appended{Messages: slices.Clone(prepared), New: make([]bool, len(prepared)), HeadSeq: rec.HeadSeq}
	head = rec.HeadSeq
	for i := range out.Messages {
		m := &out.Messages[i]
		if seq := rec.recentSeq(m.ID); seq > 0 {
			m.Seq = seq
			continue
		}
		head++
		m.Seq, out.New[i] = head, true
		add = append(add, *m)
	}
	return out, add, head
}

// appended moves rec past the entry at stream sequence seq that holds add:
// the record kept in the cache, and stored when the log has run far enough
// ahead of it (checkpoint). It returns the session's bytes after it.
func (s *Sessions) appended(ctx context.Context, w where, rec record, seq uint64, add []session.Message) (int64, error) {
	next := rec
	next.add(seq, add)
	next.UpdatedAt = s.now().UTC()
	if err := s.checkpoint(ctx, w, &next); err != nil {
		s.remember(w, nil)
		return 0, err
	}
	s.remember(w, &next)
	return next.Bytes, nil
}

// checkpointEvery is how many messages the log may run ahead of the
// stored record before an append writes it, checkpointBytes how many bytes
// of text (the tenants' bytes_stored quotas count the records' bytes: a
// usage scan misses what the log holds beyond them, at most this much a
// session), and checkpointAge how old the stored record may be (the sweep
// reads updated_at from it).
const (
	checkpointEvery = indexEvery
	checkpointBytes = 16 << 10
	checkpointAge   = time.Minute
)

// checkpoint writes rec (rolled forward over an append just written) as
// the stored record when it is due: the session's first messages (so a
// delete racing them is seen), every checkpointEvery messages or
// checkpointBytes of text, or when the stored one is older than the
// checkpoint age. A record that moved
// meanwhile (a commit, another checkpoint) is left as it is: the log
// holds the append, and readers roll forward; one deleted meanwhile is
// session.ErrNotFound.
func (s *Sessions) checkpoint(ctx context.Context, w where, rec *record) error {
	age := s.checkpointAge
	if age <= 0 {
		age = checkpointAge
	}
	if rec.stored.head > 0 && rec.HeadSeq-rec.stored.head < checkpointEvery && rec.Bytes-rec.stored.bytes < checkpointBytes && s.now().Sub(rec.stored.at) < age {
		return nil
	}
	rev, err := s.putRecord(ctx, w, rec, rec.Revision)
	if err == nil {
		rec.Revision, rec.stored = rev, checkpoint{head: rec.HeadSeq, bytes: rec.Bytes, at: rec.UpdatedAt}
		return nil
	}
	if !errors.Is(err, session.ErrConflict) {
		return err
	}
	cur, err := s.record(ctx, w)
	if err != nil {
		return err
	}
	rec.Revision, rec.stored = cur.Revision, cur.stored
	return nil
}

// checkRepeats compares each message of an append whose id the session
// holds with the stored one: another content under the id is an
// *session.IDTakenError (the append is refused whole), the same is a
// repeat. Only repeats pay for the read.
func (s *Sessions) checkRepeats(ctx context.Context, w where, rec *record, a session.Appended) error {
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
	order := slices.Clone(seqs)
	slices.Sort(order)
	order = slices.Compact(order)
	stored, err := s.messages(ctx, w, rec, order)
	if err != nil {
		return err
	}
	for _, i := range at {
		m := &a.Messages[i]
		j, _ := slices.BinarySearch(order, m.Seq)
		if st := &stored[j]; st.ID != m.ID || !m.SameAs(st) {
			return &session.IDTakenError{ID: m.ID, Seq: m.Seq}
		}
	}
	return nil
}

// Commit implements pipeline.SessionStore: the compaction message (written
// under its id; one the stream already has within its duplicate window is
// fine, and reported), then the record with compare-and-set: the commit
// point. Stored messages are never rewritten: which compaction summarised
// a message follows from the record's compaction chain. A head that moved
// (an append) is merged; a compaction that moved is session.ErrConflict. A
// crash between the message and the record leaves a compaction the
// pipeline finishes on the next request for the same key.
func (s *Sessions) Commit(ctx context.Context, c session.Commit) (existed bool, err error) {
	w, err := s.where(ctx, c.SessionID)
	if err != nil {
		return false, err
	}
	id := c.Compaction.ID
	var at uint64 // the compaction message's stream sequence
	var atEpoch string
	// The record the compaction was planned on, when this replica's cache
	// still holds it (the same revision): the compare-and-set below is
	// tried on it without reading the record and the log again, and a
	// stale one costs a retry (issue 43: two of a commit's four round
	// trips).
	rec, hit := s.cached(w)
	hit = hit && c.Base != nil && rec.Visible() && rec.Revision == c.Base.Revision && rec.Epoch == c.Base.Epoch
	for attempt := 0; attempt < casRetries; attempt++ {
		if !hit {
			if rec, err = s.current(ctx, w); err != nil {
				if at > 0 && errors.Is(err, session.ErrNotFound) {
					// Deleted meanwhile: the delete purged, or purges, it.
					_ = s.purgeSubject(context.WithoutCancel(ctx), w.dataStream(), w.subject("c"))
				}
				return existed, err
			}
		}
		cached := hit
		hit = false
		if cached && (rec.CompactionID != c.PrevCompactionID || c.TailStartSeq < 1 || c.TailStartSeq > rec.HeadSeq+1) {
			continue // refused on what is stored, not on this replica's cache
		}
		if c.Base != nil && c.Base.Epoch != "" && rec.Epoch != c.Base.Epoch {
			// Deleted and created again since it was planned: this
			// compaction is of the session before.
			return existed, fmt.Errorf("session %s was created again: %w", c.SessionID, session.ErrConflict)
		}
		if rec.CompactionID != c.PrevCompactionID {
			return existed, fmt.Errorf("session %s moved from compaction %q to %q: %w", c.SessionID, c.PrevCompactionID, rec.CompactionID, session.ErrConflict)
		}
		if c.TailStartSeq < 1 || c.TailStartSeq > rec.HeadSeq+1 {
			return existed, fmt.Errorf("%w: tail start seq %d outside 1..%d", session.ErrInvalid, c.TailStartSeq, rec.HeadSeq+1)
		}
		if at == 0 || atEpoch != rec.Epoch {
			// A repeat of the same message within the stream's duplicate
			// window (an interrupted commit resumed, another writer of the
			// same key) is answered with the first one's sequence.
			b, _ := json.Marshal(c.Compaction)
			seq, dup, err := s.publish(ctx, write{subject: w.subject("c"), data: b, epoch: rec.Epoch, msgID: rec.Epoch + ":" + id})
			if err != nil {
				return false, fmt.Errorf("write compaction %s: %w", id, err)
			}
			at, atEpoch, existed = seq, rec.Epoch, dup
		}
		base := rec.Revision
		rec.PinnedSeqs = slices.Clone(c.Pinned)
		rec.TailStartID, rec.TailStartSeq, rec.CompactionID = c.TailStartID, c.TailStartSeq, id
		rec.Compactions++
		rec.UpdatedAt = c.Now
		rec.Log.Compaction = at
		rev, err := s.putRecord(ctx, w, &rec, base)
		if err == nil {
			rec.Revision, rec.stored = rev, checkpoint{head: rec.HeadSeq, bytes: rec.Bytes, at: rec.UpdatedAt}
			s.remember(w, &rec)
			return existed, nil
		}
		if !errors.Is(err, session.ErrConflict) {
			return existed, fmt.Errorf("commit compaction %s: %w", id, err)
		}
		if !backoff(ctx, attempt) {
			return existed, ctx.Err()
		}
	}
	return existed, fmt.Errorf("commit to %s: %w after %d tries", c.SessionID, session.ErrConflict, casRetries)
}

// Delete removes every value of the session: its record, messages, chunks,
// compactions, preparation and uploads. Deleting a session that does not
// exist is not an error, so a repeated delete answers the same. The record
// is first marked deleted (compare-and-set), so no write racing the delete
// applies after it; then the session's subjects are purged.
func (s *Sessions) Delete(ctx context.Context, sid string) error {
	w, err := s.where(ctx, sid)
	if err != nil {
		return err
	}
	for range casRetries {
		rec, err := s.rawRecord(ctx, w)
		if errors.Is(err, session.ErrNotFound) || errors.Is(err, session.ErrCorrupt) {
			return s.purge(ctx, w) // what a failed create or delete may have left
		}
		if err != nil {
			return err
		}
		if err := s.deleteAt(ctx, w, rec); !errors.Is(err, session.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("delete %s: %w: it kept changing", sid, session.ErrConflict)
}

// deleteAt deletes the session if its record is still rec (its revision):
// session.ErrConflict when it moved.
func (s *Sessions) deleteAt(ctx context.Context, w where, rec record) error {
	s.remember(w, nil)
	if !rec.Deleted {
		base := rec.Revision
		rec.Deleted, rec.UpdatedAt = true, s.now().UTC()
		_, err := s.putRecord(ctx, w, &rec, base)
		if errors.Is(err, session.ErrStorageFull) {
			// No room for the tombstone: the session's data goes first
			// (a purge removes, writing nothing), then the tombstone has
			// room. A writer racing the purge moves the record, and the
			// delete is done again on it.
			if perr := s.purgeSubject(ctx, w.dataStream(), w.subject(">")); perr != nil {
				return perr
			}
			_, err = s.putRecord(ctx, w, &rec, base)
		}
		if err != nil {
			return err
		}
	}
	return s.purge(ctx, w)
}

// purge removes the session's data, then its record, from their streams
// (no delete markers are left: the subjects are as if never written).
func (s *Sessions) purge(ctx context.Context, w where) error {
	if err := s.purgeSubject(ctx, w.dataStream(), w.subject(">")); err != nil {
		return err
	}
	return s.purgeSubject(ctx, w.recordsStream(), w.recSubject())
}

func (s *Sessions) purgeSubject(ctx context.Context, stream, subj string) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	st := s.streamByName(stream)
	if st == nil {
		return fmt.Errorf("purge %s: no stream %s in this store", subj, stream)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
		return unavailable(ctx, "purge "+subj, err)
	}
	return nil
}

// streamByName finds one of the store's streams.
func (s *Sessions) streamByName(name string) jetstream.Stream {
	for _, sh := range s.shards {
		switch name {
		case DataStream(sh.n):
			return sh.data
		case "KV_" + RecordsBucket(sh.n):
			return sh.recs
		}
	}
	return nil
}
