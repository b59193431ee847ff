package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
)

// rawRecord reads the record from its bucket's leader, pending and
// deleted ones included.
func (s *Sessions) rawRecord(ctx context.Context, w where) (record, error) {
	r, err := kvLeaderGet(ctx, s.nc, RecordsBucket(w.sh.n), w.recKey())
	if errors.Is(err, session.ErrNotFound) {
		return record{}, notFound("session " + w.sid)
	}
	if err != nil {
		return record{}, err
	}
	return decodeRecord(w.sid, r)
}

func decodeRecord(sid string, r raw) (record, error) {
	var rec record
	if err := json.Unmarshal(r.data, &rec); err != nil || rec.SessionID != sid {
		if err == nil {
			err = fmt.Errorf("it names session %q", rec.SessionID)
		}
		return record{}, fmt.Errorf("session %s: %w: the record does not decode: %v", sid, session.ErrCorrupt, err)
	}
	if rec.HeadSeq > 0 && (rec.Log.Seq == 0 || int64(len(rec.Log.Index)) != (rec.HeadSeq+indexEvery-1)/indexEvery) {
		return record{}, fmt.Errorf("session %s: %w: the record's log state does not match its %d messages", sid, session.ErrCorrupt, rec.HeadSeq)
	}
	rec.Revision = r.seq
	rec.stored = checkpoint{head: rec.HeadSeq, bytes: rec.Bytes, at: rec.UpdatedAt}
	return rec, nil
}

// record reads a visible record from the leader: a create still being
// written and a delete under way are not found.
func (s *Sessions) record(ctx context.Context, w where) (record, error) {
	r, err := s.rawRecord(ctx, w)
	if err == nil && !r.Visible() {
		return record{}, notFound("session " + w.sid)
	}
	return r, err
}

// current reads a visible record from the leader and rolls it forward
// over the log entries written after it: the session as it is now.
func (s *Sessions) current(ctx context.Context, w where) (record, error) {
	rec, err := s.record(ctx, w)
	if err != nil {
		return rec, err
	}
	if err := s.rollForward(ctx, w, &rec, nil); err != nil {
		return record{}, err
	}
	return rec, nil
}

// rollForward adds to rec the log entries after its log.seq: appends
// write the record only now and then (a checkpoint), so the log is the
// truth past it. Batched direct gets read them, and the leader says where
// the log ends (what a lagging replica lacked is read from it). The
// record's updated_at becomes the last entry's time. keep, when set, gets
// each entry added, and the leader is asked where the log ends beside
// the batched read (rangeAll's beside): that is a load, on a request's
// path, where a round trip counts. An append reads the record again
// when it lost a compare-and-set: its log has moved past the record, and
// the question would be a request more for nothing.
func (s *Sessions) rollForward(ctx context.Context, w where, rec *record, keep func(entry)) error {
	err := s.rangeAll(ctx, w.dataStream(), w.subject("log"), rec.Log.Seq+1, 0, keep != nil, func(r raw) (bool, error) {
		if r.epoch() != rec.Epoch {
			return false, errStale
		}
		e, err := decodeEntry(r)
		if err != nil {
			return false, err
		}
		if e.First != rec.HeadSeq+1 {
			return false, errStale
		}
		e.addTo(rec, r.seq)
		if r.time.After(rec.UpdatedAt) {
			rec.UpdatedAt = r.time.UTC()
		}
		if keep != nil {
			keep(e)
		}
		return true, nil
	})
	if errors.Is(err, session.ErrCorrupt) {
		return s.lost(ctx, w, rec, fmt.Sprintf("the log after entry %d (%v)", rec.Log.Seq, err))
	}
	return err
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for seq := from; seq <= to; seq++ {
		out = append(out, seq)
	}
	return out
}

func (s *Sessions) messages(ctx context.Context, w where, rec *record, seqs []int64) ([]session.Message, error) {
	if len(seqs) == 0 {
		return nil, nil
	}
	msgs, _, err := s.readSeqs(ctx, w, rec, seqs, true)
	return msgs, err
}

// Load implements pipeline.SessionStore; it reads the record (from the
// leader), the pinned messages and the tail (and, with history, the
// summarised messages).
func (s *Sessions) Load(ctx context.Context, sid string, history bool) (*session.Session, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return nil, notFound("session " + sid)
	}
	stored, err := s.record(ctx, w)
	if err != nil {
		return nil, err
	}
	// Beside one another once the stored record is read (a request waits
	// on the longest, not on each in turn: issue 43): the log past it
	// (appends write the record only now and then, and the leader says
	// where the log ends), the messages it names, the compaction in
	// force, and whether a compaction was written after that one.
	rolled := make(chan rolledLog, 1)
	go func() {
		r := rolledLog{rec: stored.forked()}
		r.err = s.rollForward(ctx, w, &r.rec, func(e entry) { r.past = append(r.past, e.Msgs...) })
		rolled <- r
	}()
	settled := make(chan bool, 1)
	go func() { settled <- s.settled(ctx, w, &stored) }()
	var summary *session.Message
	var cerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if stored.CompactionID != "" {
			summary, cerr = s.compactionAt(ctx, w, &stored)
		}
	}()
	msgs, err := s.messages(ctx, w, &stored, loadSeqs(&stored))
	r := <-rolled
	<-done
	out := &session.Session{Summary: summary, Settled: <-settled}
	for _, err := range []error{r.err, cerr, err} {
		if err != nil {
			return nil, err
		}
	}
	rec := r.rec
	// Kept as this process's latest: a compaction planned on this read
	// commits on it without reading the record and the log again (three
	// round trips), and an append starts from it (both writes are
	// guarded: a stale one costs a retry).
	s.remember(w, &rec)
	out.Record = rec.Record
	if out.Messages, err = s.pastRecord(ctx, w, &rec, msgs, r.past); err != nil {
		return nil, err
	}
	if history && rec.CompactionID != "" {
		var old []int64
		for seq := int64(1); seq < rec.TailStartSeq; seq++ {
			if !slices.Contains(rec.PinnedSeqs, seq) {
				old = append(old, seq)
			}
		}
		if out.Summarised, err = s.messages(ctx, w, &rec, old); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rolledLog is a record rolled forward over the log past it, and the
// messages of the entries it read.
type rolledLog struct {
	rec  record
	past []storedMsg
	err  error
}

// loadSeqs are the seqs of the messages a load reads of what rec names:
// every one when no compaction is in force, else the pinned ones and the
// tail.
func loadSeqs(rec *record) []int64 {
	if rec.CompactionID == "" {
		return seqRange(1, rec.HeadSeq)
	}
	seqs := slices.Clone(rec.PinnedSeqs)
	seqs = append(seqs, seqRange(rec.TailStartSeq, rec.HeadSeq)...)
	slices.Sort(seqs)
	return slices.Compact(seqs)
}

// pastRecord is msgs, read of what the stored record names, followed by
// the messages of the log past it (past, the tail's: a compaction never
// ends past what its record holds), a large one read whole from its
// chunks.
func (s *Sessions) pastRecord(ctx context.Context, w where, rec *record, msgs []session.Message, past []storedMsg) ([]session.Message, error) {
	for _, m := range past {
		if m.Seq < rec.TailStartSeq {
			return nil, s.lost(ctx, w, rec, fmt.Sprintf("message %d past the record, before its tail at %d", m.Seq, rec.TailStartSeq))
		}
		if m.Blob == nil {
			msgs = append(msgs, m.Message)
			continue
		}
		whole, err := s.blob(ctx, w, rec, m.Seq, m.Blob)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, whole)
	}
	return msgs, nil
}

// settled reports whether the leader holds no compaction message of the
// session after the one rec names (none at all when it names none).
func (s *Sessions) settled(ctx context.Context, w where, rec *record) bool {
	_, err := s.leaderMsg(ctx, w.dataStream(), map[string]any{"seq": rec.Log.Compaction + 1, "next_by_subj": w.subject("c")})
	return errors.Is(err, session.ErrNotFound)
}

// Messages returns the session's record (from the leader) and the stored
// messages sel names, as stored: one batched read.
func (s *Sessions) Messages(ctx context.Context, sid string, sel session.Seqs) (session.Record, []session.Message, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return session.Record{}, nil, notFound("session " + sid)
	}
	rec, err := s.current(ctx, w)
	if err != nil {
		return session.Record{}, nil, err
	}
	seqs := sel.Select(rec.HeadSeq)
	if len(seqs) == 0 {
		return rec.Record, nil, nil
	}
	msgs, err := s.messages(ctx, w, &rec, seqs)
	return rec.Record, msgs, err
}

// compactionAt reads the compaction the record names, at its stream
// sequence.
func (s *Sessions) compactionAt(ctx context.Context, w where, rec *record) (*session.Message, error) {
	var found *session.Message
	err := s.rangeAll(ctx, w.dataStream(), w.subject("c"), rec.Log.Compaction, rec.Log.Compaction, false, func(r raw) (bool, error) {
		if r.epoch() != rec.Epoch {
			return false, errStale
		}
		m, err := decodeCompaction(w.sid, r.data)
		if err != nil {
			return false, err
		}
		found = m
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	if found == nil || found.ID != rec.CompactionID {
		return nil, s.lost(ctx, w, rec, "compaction "+rec.CompactionID)
	}
	return found, nil
}

func decodeCompaction(sid string, data []byte) (*session.Message, error) {
	var m session.Message
	if err := unmarshal(data, &m); err != nil || m.ID == "" {
		return nil, fmt.Errorf("session %s: %w: a compaction message does not decode", sid, session.ErrCorrupt)
	}
	return &m, nil
}

// compactions calls fn with the session's compaction messages from stream
// sequence from on (every one written, committed or not, of the record's
// epoch), oldest first.
func (s *Sessions) compactions(ctx context.Context, w where, rec *record, from uint64, fn func(seq uint64, m *session.Message) bool) error {
	return s.rangeAll(ctx, w.dataStream(), w.subject("c"), max(from, 1), 0, false, func(r raw) (bool, error) {
		if r.epoch() != rec.Epoch {
			return true, nil // another incarnation's, on a lagging replica
		}
		m, err := decodeCompaction(w.sid, r.data)
		if err != nil {
			return false, err
		}
		return fn(r.seq, m), nil
	})
}

// Compaction implements pipeline.SessionStore: a stored compaction,
// committed or not. The one sought is almost always the record's or one
// written after it (an interrupted commit): those are read first.
func (s *Sessions) Compaction(ctx context.Context, sid, id string) (*session.Message, error) {
	w, err := s.where(ctx, sid)
	if err != nil || !contract.ValidSessionID(id) {
		return nil, notFound("compaction " + id)
	}
	rec, err := s.rawRecord(ctx, w)
	if err != nil {
		if errors.Is(err, session.ErrNotFound) {
			return nil, notFound("compaction " + id)
		}
		return nil, err
	}
	var found *session.Message
	seek := func(from, to uint64) error {
		return s.compactions(ctx, w, &rec, from, func(seq uint64, m *session.Message) bool {
			if to > 0 && seq >= to {
				return false
			}
			if m.ID == id {
				found = m
				return false
			}
			return true
		})
	}
	if err := seek(rec.Log.Compaction, 0); err != nil {
		return nil, err
	}
	if found == nil && rec.Log.Compaction > 1 {
		if err := seek(1, rec.Log.Compaction); err != nil {
			return nil, err
		}
	}
	if found == nil {
		return nil, notFound("compaction " + id)
	}
	return found, nil
}

// Record returns the session's record.
func (s *Sessions) Record(ctx context.Context, sid string) (session.Record, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return session.Record{}, notFound("session " + sid)
	}
	rec, err := s.current(ctx, w)
	return rec.Record, err
}

// Message returns the session's message with seq, summarised or not.
func (s *Sessions) Message(ctx context.Context, sid string, seq int64) (session.Message, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return session.Message{}, notFound("session " + sid)
	}
	rec, err := s.current(ctx, w)
	if err != nil {
		return session.Message{}, err
	}
	if seq < 1 || seq > rec.HeadSeq {
		return session.Message{}, notFound(fmt.Sprintf("session %s message %d (the session has 1..%d)", sid, seq, rec.HeadSeq))
	}
	msgs, err := s.messages(ctx, w, &rec, []int64{seq})
	if err != nil {
		return session.Message{}, err
	}
	return msgs[0], nil
}

// History returns every message and every committed compaction of a
// session (the record's chain, oldest first). Each message a compaction
// covers has summarised_by set to it; a compaction message written by a
// writer that then lost its commit is neither listed nor marks anything.
func (s *Sessions) History(ctx context.Context, sid string) ([]session.Message, []session.Message, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return nil, nil, notFound("session " + sid)
	}
	rec, err := s.current(ctx, w)
	if err != nil {
		return nil, nil, err
	}
	msgs, err := s.messages(ctx, w, &rec, seqRange(1, rec.HeadSeq))
	if err != nil {
		return nil, nil, err
	}
	byID := map[string]*session.Message{}
	if rec.CompactionID != "" {
		err = s.compactions(ctx, w, &rec, 1, func(seq uint64, m *session.Message) bool {
			if byID[m.ID] == nil {
				byID[m.ID] = m
			}
			return seq < rec.Log.Compaction
		})
		if err != nil {
			return nil, nil, err
		}
	}
	pinned := map[int64]bool{}
	for _, seq := range rec.PinnedSeqs {
		pinned[seq] = true
	}
	// The committed compactions are the record's chain; one written by a
	// writer that then lost its commit is not part of the history.
	var comps []session.Message
	for id := rec.CompactionID; id != "" && len(comps) <= rec.Compactions; {
		c := byID[id]
		if c == nil {
			return nil, nil, s.lost(ctx, w, &rec, "compaction "+id)
		}
		if c.Compaction == nil {
			return nil, nil, fmt.Errorf("session %s compaction %s: %w: no metadata", sid, id, session.ErrCorrupt)
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
