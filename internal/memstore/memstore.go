// Package memstore keeps sessions and breakers in process memory. It is a
// complete implementation of the pipeline's stores (used by `compact --file`
// and by tests), with the same semantics as the JetStream KV stores: revision
// compare-and-set on the record, deterministic compaction ids, append-only
// compactions.
package memstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

var (
	_ pipeline.SessionStore = (*Store)(nil)
	_ pipeline.BreakerStore = (*Breakers)(nil)
)

// Store is an in-memory session store, safe for concurrent use. Values
// handed in and out are copies, so callers never share state with it.
type Store struct {
	mu       sync.RWMutex
	sessions map[tenant.Session]*entry
	now      func() time.Time
}

type entry struct {
	rec         session.Record
	msgs        []session.Message // msgs[i].Seq == i+1
	compactions map[string]session.Message
	order       []string         // compaction ids in commit order
	ids         map[string]int64 // message id to seq
	uploads     map[string]map[int]uploadPart
	prepared    *session.PreparedCompaction
	prepRev     uint64
}

// New returns an empty store.
func New() *Store { return &Store{sessions: map[tenant.Session]*entry{}, now: time.Now} }

// Create stores a new session with its first messages, assigning ids (one
// derived from the content for a message without) and seqs from 1. A create
// repeated with the same content succeeds; with other content it returns
// session.ErrExists. A bad message is an error wrapping session.ErrInvalid.
func (s *Store) Create(ctx context.Context, rec session.Record, msgs []session.Message) (session.Record, error) {
	if rec.SessionID == "" {
		return session.Record{}, fmt.Errorf("%w: session id is required", session.ErrInvalid)
	}
	if rec.ContextLimit < 0 {
		return session.Record{}, fmt.Errorf("%w: context_limit must be >= 0", session.ErrInvalid)
	}
	digest := session.CreateDigest(rec, msgs)
	prepared, err := session.Prepare(msgs, 0, func(i int) string { return session.CreatedMessageID(rec.SessionID, digest, i) })
	if err != nil {
		return session.Record{}, err
	}
	if err := session.CheckConversation(prepared); err != nil {
		return session.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.sessions[keyOf(ctx, rec.SessionID)]; ok {
		if e.rec.CreateDigest == digest {
			return cloneRecord(e.rec), nil
		}
		return session.Record{}, fmt.Errorf("session %s: %w with other content", rec.SessionID, session.ErrExists)
	}
	now := s.now().UTC()
	rec.HeadSeq = int64(len(prepared))
	rec.Bytes = 0
	for i := range prepared {
		rec.Bytes += int64(session.TextBytes(&prepared[i]))
	}
	rec.CreatedAt, rec.UpdatedAt = now, now
	rec.Revision = 1
	rec.PinnedSeqs, rec.TailStartID, rec.TailStartSeq, rec.CompactionID, rec.Compactions = nil, "", 0, "", 0
	rec.Epoch, rec.CreateDigest, rec.Pending, rec.Deleted = uuid.NewString(), digest, false, false
	e := &entry{rec: rec, msgs: prepared, compactions: map[string]session.Message{}, ids: map[string]int64{}}
	for _, m := range prepared {
		e.ids[m.ID] = m.Seq
	}
	s.sessions[keyOf(ctx, rec.SessionID)] = e
	return cloneRecord(rec), nil
}

// Append adds messages at the session's head; see AppendWith.
func (s *Store) Append(ctx context.Context, sessionID string, msgs ...session.Message) ([]session.Message, error) {
	a, err := s.AppendWith(ctx, sessionID, msgs, session.AppendOptions{})
	return a.Messages, err
}

// AppendWith adds messages at the session's head, as a runtime does
// between compactions, and returns them with their ids and seqs. A message
// whose id the session holds is not added again (its stored seq is
// answered); with opt.ExpectedHeadSeq set, the append applies only at that
// head. It never conflicts with a compaction: the compaction's commit keeps
// the new head.
func (s *Store) AppendWith(ctx context.Context, sessionID string, msgs []session.Message, opt session.AppendOptions) (session.Appended, error) {
	if len(msgs) == 0 {
		return session.Appended{}, fmt.Errorf("%w: an append needs messages", session.ErrInvalid)
	}
	prepared, err := session.Prepare(msgs, 0, func(int) string { return uuid.NewString() })
	if err != nil {
		return session.Appended{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok {
		return session.Appended{}, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	out := session.Appended{Messages: prepared, New: make([]bool, len(prepared))}
	head := e.rec.HeadSeq
	for i := range prepared {
		if seq, ok := e.ids[prepared[i].ID]; ok {
			if !prepared[i].SameAs(&e.msgs[seq-1]) {
				return session.Appended{}, &session.IDTakenError{ID: prepared[i].ID, Seq: seq}
			}
			prepared[i].Seq = seq
			continue
		}
		head++
		prepared[i].Seq, out.New[i] = head, true
	}
	err = session.CheckToolResults(prepared, func(i int) bool { return out.New[i] }, func() (*session.Message, []string, error) {
		for i := len(e.msgs) - 1; i >= 0; i-- {
			if e.msgs[i].Role != session.RoleTool {
				return &e.msgs[i], session.Open(e.msgs), nil
			}
		}
		return nil, []string{}, nil
	})
	if err != nil {
		return session.Appended{}, err
	}
	if head != e.rec.HeadSeq && opt.ExpectedHeadSeq != nil && *opt.ExpectedHeadSeq != e.rec.HeadSeq {
		return session.Appended{}, &session.HeadMovedError{Expected: *opt.ExpectedHeadSeq, Head: e.rec.HeadSeq}
	}
	for i, m := range prepared {
		if out.New[i] {
			e.msgs = append(e.msgs, m)
			e.ids[m.ID] = m.Seq
			e.rec.Bytes += int64(session.TextBytes(&m))
		}
	}
	if head != e.rec.HeadSeq {
		e.rec.HeadSeq = head
		e.rec.UpdatedAt = s.now().UTC()
		e.rec.Revision++
	}
	out.Messages, out.HeadSeq, out.Bytes = slices.Clone(prepared), head, e.rec.Bytes
	return out, nil
}

// Message returns the session's message with seq.
func (s *Store) Message(ctx context.Context, sessionID string, seq int64) (session.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok {
		return session.Message{}, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	if seq < 1 || seq > int64(len(e.msgs)) {
		return session.Message{}, fmt.Errorf("session %s message %d (the session has 1..%d): %w", sessionID, seq, len(e.msgs), session.ErrNotFound)
	}
	return e.msgs[seq-1], nil
}

// Messages returns the session's record and the stored messages sel
// names, as stored.
func (s *Store) Messages(ctx context.Context, sessionID string, sel session.Seqs) (session.Record, []session.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok {
		return session.Record{}, nil, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	seqs := sel.Select(int64(len(e.msgs)))
	out := make([]session.Message, len(seqs))
	for i, q := range seqs {
		out[i] = e.msgs[q-1]
	}
	return cloneRecord(e.rec), out, nil
}

// Delete removes the session; deleting one that does not exist is not an
// error.
func (s *Store) Delete(ctx context.Context, sessionID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.sessions, keyOf(ctx, sessionID))
	return nil
}

// Load implements pipeline.SessionStore.
func (s *Store) Load(ctx context.Context, sessionID string, history bool) (*session.Session, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
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
func (s *Store) Compaction(ctx context.Context, sessionID, compactionID string) (*session.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
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
func (s *Store) Commit(ctx context.Context, c session.Commit) (existed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[keyOf(ctx, c.SessionID)]
	if !ok {
		return false, fmt.Errorf("session %s: %w", c.SessionID, session.ErrNotFound)
	}
	id := c.Compaction.ID
	_, existed = e.compactions[id]
	if c.Base != nil && c.Base.Epoch != "" && e.rec.Epoch != c.Base.Epoch {
		return existed, fmt.Errorf("session %s was created again: %w", c.SessionID, session.ErrConflict)
	}
	if e.rec.CompactionID != c.PrevCompactionID {
		return existed, fmt.Errorf("session %s moved from compaction %q to %q: %w", c.SessionID, c.PrevCompactionID, e.rec.CompactionID, session.ErrConflict)
	}
	if c.TailStartSeq < 1 || c.TailStartSeq > e.rec.HeadSeq+1 {
		return false, fmt.Errorf("%w: tail start seq %d outside 1..%d", session.ErrInvalid, c.TailStartSeq, e.rec.HeadSeq+1)
	}
	if !existed {
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
	return existed, nil
}

// Record returns the session's record.
func (s *Store) Record(ctx context.Context, sessionID string) (session.Record, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok {
		return session.Record{}, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	return cloneRecord(e.rec), nil
}

// History returns every message of the session in seq order, and its
// committed compactions, oldest first: nothing a compaction summarised is
// ever lost.
func (s *Store) History(ctx context.Context, sessionID string) ([]session.Message, []session.Message, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
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
	m  map[tenant.Session]session.Breaker
}

// NewBreakers returns an empty breaker store.
func NewBreakers() *Breakers { return &Breakers{m: map[tenant.Session]session.Breaker{}} }

// Breaker implements pipeline.BreakerStore.
func (b *Breakers) Breaker(ctx context.Context, sessionID string) (session.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if br, ok := b.m[keyOf(ctx, sessionID)]; ok {
		return br, nil
	}
	return session.Breaker{SessionID: sessionID, State: session.BreakerClosed}, nil
}

// RecordFailure implements pipeline.BreakerStore.
func (b *Breakers) RecordFailure(ctx context.Context, sessionID string, f session.Failure, now time.Time) (session.Breaker, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	br, ok := b.m[keyOf(ctx, sessionID)]
	if !ok {
		br = session.Breaker{SessionID: sessionID, State: session.BreakerClosed}
	}
	counted, opened := br.Fail(f, now)
	if counted {
		br.Revision++
		b.m[keyOf(ctx, sessionID)] = br
	}
	return br, opened, nil
}

// Delete removes the session's breaker.
func (b *Breakers) Delete(ctx context.Context, sessionID string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, keyOf(ctx, sessionID))
	return nil
}

// Probe implements pipeline.BreakerStore.
func (b *Breakers) Probe(ctx context.Context, sessionID string, cooldown time.Duration, now time.Time) (session.Breaker, bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	br, ok := b.m[keyOf(ctx, sessionID)]
	if !ok || !br.Open() {
		return session.Breaker{SessionID: sessionID, State: session.BreakerClosed}, false, nil
	}
	if !br.ProbeDue(cooldown, now) {
		return br, false, nil
	}
	t := now.UTC()
	br.ProbeAt = &t
	br.Revision++
	b.m[keyOf(ctx, sessionID)] = br
	return br, true, nil
}

// Reset implements pipeline.BreakerStore.
func (b *Breakers) Reset(ctx context.Context, sessionID string, _ time.Time) (session.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	prev, ok := b.m[keyOf(ctx, sessionID)]
	if !ok {
		prev = session.Breaker{SessionID: sessionID, State: session.BreakerClosed}
	}
	delete(b.m, keyOf(ctx, sessionID))
	return prev, nil
}

// List returns every stored breaker.
func (b *Breakers) List(ctx context.Context) ([]session.Breaker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]session.Breaker, 0, len(b.m))
	t := tenant.From(ctx)
	for k, br := range b.m {
		if k.Tenant == t {
			out = append(out, br)
		}
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

// PutUploadPart stores part of parts of upload id for the session.
func (s *Store) PutUploadPart(ctx context.Context, sessionID, id string, part, parts int, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok {
		return fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	if e.uploads == nil {
		e.uploads = map[string]map[int]uploadPart{}
	}
	if e.uploads[id] == nil {
		e.uploads[id] = map[int]uploadPart{}
	}
	e.uploads[id][part] = uploadPart{parts: parts, data: slices.Clone(data)}
	return nil
}

// UploadParts returns upload id's parts joined.
func (s *Store) UploadParts(ctx context.Context, sessionID, id string) ([]byte, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok {
		return nil, fmt.Errorf("session %s: %w", sessionID, session.ErrNotFound)
	}
	ps, ok := e.uploads[id]
	if !ok || len(ps) == 0 {
		return nil, fmt.Errorf("upload %q of session %s: %w", id, sessionID, session.ErrNotFound)
	}
	p0, ok := ps[0]
	if !ok {
		return nil, fmt.Errorf("upload %q of session %s: %w (its part 0 is missing)", id, sessionID, session.ErrNotFound)
	}
	var out []byte
	for i := range p0.parts {
		p, ok := ps[i]
		if !ok || p.parts != p0.parts {
			return nil, fmt.Errorf("%w: upload %q of session %s: part %d of %d is missing", session.ErrInvalid, id, sessionID, i, p0.parts)
		}
		out = append(out, p.data...)
	}
	return out, nil
}

// DeleteUpload removes upload id's parts.
func (s *Store) DeleteUpload(ctx context.Context, sessionID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.sessions[keyOf(ctx, sessionID)]; ok {
		delete(e.uploads, id)
	}
	return nil
}

type uploadPart struct {
	parts int
	data  []byte
}

// Prepared implements pipeline.PreparedStore.
func (s *Store) Prepared(ctx context.Context, sessionID string) (session.PreparedCompaction, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.sessions[keyOf(ctx, sessionID)]
	if !ok || !e.rec.Visible() || e.prepared == nil {
		return session.PreparedCompaction{}, session.ErrNotFound
	}
	p := clonePrepared(*e.prepared)
	p.Revision = e.prepRev
	return p, nil
}

// PutPrepared implements pipeline.PreparedStore: compare-and-set on
// p.Revision (0: none stored).
func (s *Store) PutPrepared(ctx context.Context, p session.PreparedCompaction) (session.PreparedCompaction, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sessions[keyOf(ctx, p.SessionID)]
	if !ok || !e.rec.Visible() {
		return p, session.ErrNotFound
	}
	cur := uint64(0)
	if e.prepared != nil {
		cur = e.prepRev
	}
	if p.Revision != cur {
		return p, fmt.Errorf("prepared compaction of %s is at revision %d, not %d: %w", p.SessionID, cur, p.Revision, session.ErrConflict)
	}
	p.Epoch = e.rec.Epoch
	p.Revision = e.prepRev + 1
	c := clonePrepared(p)
	e.prepared, e.prepRev = &c, p.Revision
	return p, nil
}

// clonePrepared is a deep copy (through JSON, as the KV store keeps it).
func clonePrepared(p session.PreparedCompaction) session.PreparedCompaction {
	b, err := json.Marshal(p)
	if err != nil {
		panic(err) // a PreparedCompaction always marshals
	}
	var c session.PreparedCompaction
	_ = json.Unmarshal(b, &c)
	c.Revision = p.Revision
	return c
}

// List returns a page of the sessions, ordered by id; the cursor is the
// last id of the previous page.
func (s *Store) List(ctx context.Context, opt session.ListOptions) (session.SessionPage, error) {
	page := session.SessionPage{Sessions: []session.Listed{}}
	if err := opt.Check(); err != nil {
		return page, err
	}
	if err := checkCursor(opt.After); err != nil {
		return page, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	now := s.now()
	ids := make([]string, 0, len(s.sessions))
	t := tenant.From(ctx)
	for k := range s.sessions {
		if k.Tenant == t && k.ID > opt.After {
			ids = append(ids, k.ID)
		}
	}
	slices.Sort(ids)
	for i, id := range ids {
		if len(page.Sessions) == opt.Limit {
			page.Next = ids[i-1]
			break
		}
		if l := session.ListedOf(s.sessions[tenant.Session{Tenant: t, ID: id}].rec); opt.Keep(l, now) {
			page.Sessions = append(page.Sessions, l)
		}
	}
	return page, nil
}

// Page returns up to limit breakers (0: session.DefaultPageSize) ordered
// by session id, after the cursor: the last id of the previous page.
func (b *Breakers) Page(ctx context.Context, after string, limit int) (session.BreakerPage, error) {
	page := session.BreakerPage{Breakers: []session.Breaker{}}
	opt := session.ListOptions{Limit: limit}
	if err := opt.Check(); err != nil {
		return page, err
	}
	if err := checkCursor(after); err != nil {
		return page, err
	}
	all, _ := b.List(ctx)
	for _, br := range all {
		if br.SessionID <= after {
			continue
		}
		if len(page.Breakers) == opt.Limit {
			page.Next = page.Breakers[len(page.Breakers)-1].SessionID
			break
		}
		page.Breakers = append(page.Breakers, br)
	}
	return page, nil
}

// checkCursor refuses a cursor no list answered: a list's cursor is a
// session id.
func checkCursor(c string) error {
	for _, r := range c {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("%w: cursor %q is not one a list answered", session.ErrInvalid, c)
		}
	}
	return nil
}

// keyOf is a session of ctx's tenant.
func keyOf(ctx context.Context, sid string) tenant.Session {
	return tenant.Session{Tenant: tenant.From(ctx), ID: sid}
}
