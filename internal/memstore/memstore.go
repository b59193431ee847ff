// Package memstore keeps sessions and breakers in process memory. It is a
// complete implementation of the pipeline's stores (used by `compact --file`
// and by tests), with the same semantics as the JetStream KV stores: revision
// compare-and-set on the record, deterministic compaction ids, append-only
// compactions.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

var (
	_ pipeline.SessionStore = (*Store)(nil)
	_ pipeline.BreakerStore = (*Breakers)(nil)
)

// Store is an in-memory session store, safe for concurrent use. Values
// handed in and out are copies, so callers never share state with it.
type Store struct {
	mu       sync.RWMutex
	sessions map[string]*entry
	now      func() time.Time
}

type entry struct {
	rec         session.Record
	msgs        []session.Message // msgs[i].Seq == i+1
	compactions map[string]session.Message
	order       []string // compaction ids in commit order
}

// New returns an empty store.
func New() *Store { return &Store{sessions: map[string]*entry{}, now: time.Now} }

// Create stores a new session with its first messages, assigning ids (when
// empty) and seqs from 1. It returns session.ErrExists for a taken id and an
// error wrapping session.ErrInvalid for a bad message.
func (s *Store) Create(_ context.Context, rec session.Record, msgs []session.Message) (session.Record, error) {
	if rec.SessionID == "" {
		return session.Record{}, fmt.Errorf("%w: session id is required", session.ErrInvalid)
	}
	prepared, err := prepare(msgs, 0)
	if err != nil {
		return session.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[rec.SessionID]; ok {
		return session.Record{}, fmt.Errorf("session %s: %w", rec.SessionID, session.ErrExists)
	}
	now := s.now().UTC()
	rec.HeadSeq = int64(len(prepared))
	rec.CreatedAt, rec.UpdatedAt = now, now
	rec.Revision = 1
	rec.PinnedSeqs, rec.TailStartID, rec.TailStartSeq, rec.CompactionID, rec.Compactions = nil, "", 0, "", 0
	s.sessions[rec.SessionID] = &entry{rec: rec, msgs: prepared, compactions: map[string]session.Message{}}
	return rec, nil
}

func prepare(msgs []session.Message, headSeq int64) ([]session.Message, error) {
	out := make([]session.Message, len(msgs))
	for i, m := range msgs {
		if err := m.Validate(); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		if m.ID == "" {
			m.ID = uuid.NewString()
		}
		m.Seq = headSeq + int64(i) + 1
		m.IsCompaction, m.Compaction, m.SummarisedBy = false, nil, ""
		out[i] = m
	}
	return out, nil
}

// Append adds messages at the session's head, as a runtime does between
// compactions, and returns them with their ids and seqs. It never conflicts
// with a compaction: the compaction's commit keeps the new head.
func (s *Store) Append(_ context.Context, sessionID string, msgs ...session.Message) ([]session.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[sessionID]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	prepared, err := prepare(msgs, e.rec.HeadSeq)
	if err != nil {
		return nil, err
	}
	e.msgs = append(e.msgs, prepared...)
	e.rec.HeadSeq += int64(len(prepared))
	e.rec.UpdatedAt = s.now().UTC()
	e.rec.Revision++
	return slices.Clone(prepared), nil
}

// Load implements pipeline.SessionStore.
func (s *Store) Load(_ context.Context, sessionID string, history bool) (*session.Session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[sessionID]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	out := &session.Session{Record: cloneRecord(e.rec)}
	if e.rec.CompactionID == "" {
		out.Messages = slices.Clone(e.msgs)
		return out, nil
	}
	c := e.compactions[e.rec.CompactionID]
	out.Summary = &c
	pinned := make(map[int64]bool, len(e.rec.PinnedSeqs))
	for _, seq := range e.rec.PinnedSeqs {
		pinned[seq] = true
		out.Messages = append(out.Messages, e.msgs[seq-1])
	}
	for i := range e.msgs {
		m := e.msgs[i]
		switch {
		case pinned[m.Seq]:
		case m.Seq >= e.rec.TailStartSeq:
			out.Messages = append(out.Messages, m)
		case history:
			out.Summarised = append(out.Summarised, m)
		}
	}
	return out, nil
}

// Compaction implements pipeline.SessionStore.
func (s *Store) Compaction(_ context.Context, sessionID, compactionID string) (*session.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[sessionID]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	c, ok := e.compactions[compactionID]
	if !ok {
		return nil, fmt.Errorf("compaction %s: %w", compactionID, session.ErrNotFound)
	}
	return &c, nil
}

// Commit implements pipeline.SessionStore. A commit whose compaction the
// record already points to returns session.ErrConflict like any lost race;
// the caller tells the cases apart by reading the record.
func (s *Store) Commit(_ context.Context, c session.Commit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[c.SessionID]
	if !ok {
		return fmt.Errorf("session %s: %w", c.SessionID, session.ErrNotFound)
	}
	id := c.Compaction.ID
	if e.rec.CompactionID != c.PrevCompactionID {
		return fmt.Errorf("session %s moved from compaction %q to %q: %w", c.SessionID, c.PrevCompactionID, e.rec.CompactionID, session.ErrConflict)
	}
	if c.TailStartSeq < 1 || c.TailStartSeq > e.rec.HeadSeq+1 {
		return fmt.Errorf("%w: tail start seq %d outside 1..%d", session.ErrInvalid, c.TailStartSeq, e.rec.HeadSeq+1)
	}
	if _, exists := e.compactions[id]; !exists {
		e.compactions[id] = c.Compaction
		e.order = append(e.order, id)
	}
	for _, seq := range c.Summarised {
		if seq >= 1 && seq <= int64(len(e.msgs)) {
			e.msgs[seq-1].SummarisedBy = id
		}
	}
	e.rec.PinnedSeqs = slices.Clone(c.Pinned)
	e.rec.TailStartID, e.rec.TailStartSeq = c.TailStartID, c.TailStartSeq
	e.rec.CompactionID = id
	e.rec.Compactions++
	e.rec.UpdatedAt = c.Now
	e.rec.Revision++
	return nil
}

// Record returns the session's record.
func (s *Store) Record(_ context.Context, sessionID string) (session.Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[sessionID]
	if !ok {
		return session.Record{}, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	return cloneRecord(e.rec), nil
}

// History returns every message of the session in seq order, and its
// committed compactions, oldest first: nothing a compaction summarised is
// ever lost.
func (s *Store) History(_ context.Context, sessionID string) ([]session.Message, []session.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[sessionID]
	if !ok {
		return nil, nil, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	comps := make([]session.Message, 0, len(e.order))
	for _, id := range e.order {
		comps = append(comps, e.compactions[id])
	}
	return slices.Clone(e.msgs), comps, nil
}

func cloneRecord(r session.Record) session.Record {
	r.PinnedSeqs = slices.Clone(r.PinnedSeqs)
	return r
}

// Breakers is an in-memory breaker store, safe for concurrent use.
type Breakers struct {
	mu sync.Mutex
	m  map[string]session.Breaker
}

// NewBreakers returns an empty breaker store.
func NewBreakers() *Breakers { return &Breakers{m: map[string]session.Breaker{}} }

// Breaker implements pipeline.BreakerStore.
func (b *Breakers) Breaker(_ context.Context, sessionID string) (session.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if br, ok := b.m[sessionID]; ok {
		return br, nil
	}
	return session.Breaker{SessionID: sessionID, State: session.BreakerClosed}, nil
}

// RecordFailure implements pipeline.BreakerStore.
func (b *Breakers) RecordFailure(_ context.Context, sessionID, lastError string, maxFailures int, now time.Time) (session.Breaker, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	br, ok := b.m[sessionID]
	if !ok {
		br = session.Breaker{SessionID: sessionID, State: session.BreakerClosed}
	}
	br.Failures++
	br.LastError = lastError
	br.UpdatedAt = now.UTC()
	br.Revision++
	opened := false
	if !br.Open() && br.Failures >= maxFailures {
		br.State = session.BreakerOpen
		t := now.UTC()
		br.OpenedAt = &t
		opened = true
	}
	b.m[sessionID] = br
	return br, opened, nil
}

// Probe implements pipeline.BreakerStore.
func (b *Breakers) Probe(_ context.Context, sessionID string, cooldown time.Duration, now time.Time) (session.Breaker, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	br, ok := b.m[sessionID]
	if !ok || !br.Open() {
		return session.Breaker{SessionID: sessionID, State: session.BreakerClosed}, false, nil
	}
	if !br.ProbeDue(cooldown, now) {
		return br, false, nil
	}
	t := now.UTC()
	br.ProbeAt = &t
	br.Revision++
	b.m[sessionID] = br
	return br, true, nil
}

// Reset implements pipeline.BreakerStore.
func (b *Breakers) Reset(_ context.Context, sessionID string, _ time.Time) (session.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, ok := b.m[sessionID]
	if !ok {
		prev = session.Breaker{SessionID: sessionID, State: session.BreakerClosed}
	}
	delete(b.m, sessionID)
	return prev, nil
}

// List returns every stored breaker.
func (b *Breakers) List(_ context.Context) ([]session.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]session.Breaker, 0, len(b.m))
	for _, br := range b.m {
		out = append(out, br)
	}
	slices.SortFunc(out, func(a, c session.Breaker) int {
		if a.SessionID < c.SessionID {
			return -1
		}
		if a.SessionID > c.SessionID {
			return 1
		}
		return 0
	})
	return out, nil
}
