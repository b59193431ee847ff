package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

var _ pipeline.PreparedStore = (*Sessions)(nil)

// The session's prepared compaction is the latest message on its .prep
// subject (each one a rollup: the earlier ones are dropped), its stream
// sequence the revision.

// Prepared returns the session's prepared compaction, read from the
// leader; session.ErrNotFound when there is none. One left by a deleted
// incarnation of the session is returned with its epoch (not Usable), so
// that the next preparation can replace it.
func (s *Sessions) Prepared(ctx context.Context, sid string) (session.PreparedCompaction, error) {
	w, err := s.where(ctx, sid)
	if err != nil {
		return session.PreparedCompaction{}, err
	}
	r, err := s.leaderMsg(ctx, w.dataStream(), map[string]any{"last_by_subj": w.subject("prep")})
	if errors.Is(err, session.ErrNotFound) {
		return session.PreparedCompaction{}, notFound("prepared compaction of " + sid)
	}
	if err != nil {
		return session.PreparedCompaction{}, err
	}
	var p session.PreparedCompaction
	if err := json.Unmarshal(r.data, &p); err != nil || p.SessionID != sid {
		// Not what this service writes: report it as none, with the
		// revision, so that a preparation overwrites it.
		return session.PreparedCompaction{SessionID: sid, State: session.PreparedFailed, Revision: r.seq,
			Error: fmt.Sprintf("stored value does not decode (%v)", err)}, nil
	}
	if e := r.epoch(); e != "" {
		p.Epoch = e
	}
	p.Revision = r.seq
	return p, nil
}

// PutPrepared writes p if the stored one is still at p.Revision (0: none
// is stored) and returns p with its new revision: session.ErrConflict when
// another writer moved it first, session.ErrNotFound when the session does
// not exist. p is tagged with the session's epoch.
func (s *Sessions) PutPrepared(ctx context.Context, p session.PreparedCompaction) (session.PreparedCompaction, error) {
	w, err := s.where(ctx, p.SessionID)
	if err != nil {
		return p, err
	}
	rec, err := s.record(ctx, w)
	if err != nil {
		return p, err
	}
	p.Epoch = rec.Epoch
	b, err := json.Marshal(p)
	if err != nil {
		return p, fmt.Errorf("%w: prepared compaction: %v", session.ErrInvalid, err)
	}
	seq, _, err := s.publish(ctx, write{subject: w.subject("prep"), data: b, epoch: rec.Epoch, expect: expect(p.Revision), rollup: true})
	if err != nil {
		return p, err
	}
	p.Revision = seq
	return p, nil
}
