package legacystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

var _ pipeline.PreparedStore = (*Sessions)(nil)

// prepKey is the key of the session's prepared compaction (one per
// session, replaced by the next preparation, purged with the session).
func prepKey(sid string) string { return sid + ".prep" }

// Prepared returns the session's prepared compaction, read from the
// leader; session.ErrNotFound when there is none. One left by a deleted
// incarnation of the session is returned with its epoch (not Usable), so
// that the next preparation can replace it.
func (s *Sessions) Prepared(ctx context.Context, sid string) (session.PreparedCompaction, error) {
	if err := checkID(sid); err != nil {
		return session.PreparedCompaction{}, err
	}
	v, err := s.leaderGet(ctx, prepKey(sid))
	if errors.Is(err, session.ErrNotFound) {
		return session.PreparedCompaction{}, notFound("prepared compaction of " + sid)
	}
	if err != nil {
		return session.PreparedCompaction{}, err
	}
	var p session.PreparedCompaction
	if err := json.Unmarshal(v.data, &p); err != nil || p.SessionID != sid {
		// Not what this service writes: report it as none, with the
		// revision, so that a preparation overwrites it.
		return session.PreparedCompaction{SessionID: sid, State: session.PreparedFailed, Revision: v.rev,
			Error: fmt.Sprintf("stored value does not decode (%v)", err)}, nil
	}
	if e := v.epoch(); e != "" {
		p.Epoch = e
	}
	p.Revision = v.rev
	return p, nil
}

// PutPrepared writes p if the stored one is still at p.Revision (0: none
// is stored) and returns p with its new revision: session.ErrConflict when
// another writer moved it first, session.ErrNotFound when the session does
// not exist. p is tagged with the session's epoch.
func (s *Sessions) PutPrepared(ctx context.Context, p session.PreparedCompaction) (session.PreparedCompaction, error) {
	if err := checkID(p.SessionID); err != nil {
		return p, err
	}
	rec, err := s.record(ctx, p.SessionID)
	if err != nil {
		return p, err
	}
	p.Epoch = rec.Epoch
	b, err := json.Marshal(p)
	if err != nil {
		return p, fmt.Errorf("%w: prepared compaction: %v", session.ErrInvalid, err)
	}
	r, err := s.put(ctx, prepKey(p.SessionID), b, rev(p.Revision), rec.Epoch)
	if err != nil {
		return p, err
	}
	p.Revision = r
	return p, nil
}
