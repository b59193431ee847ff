package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// lease is a piece of work one replica does for the deployment, held
// until a time and renewed by its holder each time it does the work.
type lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// takeLease takes, or renews, the lease name for d (compare-and-set on the
// meta bucket's key lease.<name>): false when another process holds it.
func (s *Sessions) takeLease(ctx context.Context, name string, d time.Duration) (bool, error) {
	key := "lease." + name
	now := s.now()
	next, _ := json.Marshal(lease{Holder: s.holder, Until: now.Add(d)})
	e, err := s.meta.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		_, err = s.meta.Create(ctx, key, next)
	case err != nil:
		return false, unavailable(ctx, "read lease "+name, err)
	default:
		var l lease
		if json.Unmarshal(e.Value(), &l) == nil && l.Holder != s.holder && now.Before(l.Until) {
			return false, nil
		}
		_, err = s.meta.Update(ctx, key, next, e.Revision())
	}
	if errors.Is(err, jetstream.ErrKeyExists) {
		return false, nil // another process took it first
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return false, nil
	}
	if err != nil {
		return false, unavailable(ctx, "take lease "+name, err)
	}
	return true, nil
}

// Sweep deletes the sessions nobody wrote to within ttl (their record's
// updated_at; a create left pending that long too), of every tenant, and
// returns them.
// It reads only the records (one pass over each shard's bucket), and one
// replica of a deployment sweeps: the one holding the sweep lease (taken
// for a fifth of ttl, 2 s to 10 min, and renewed by each sweep of its
// holder); the others sweep nothing. A session written to meanwhile is
// kept: the delete is a compare-and-set on the record read from the
// leader.
func (s *Sessions) Sweep(ctx context.Context, ttl time.Duration) ([]tenant.Session, error) {
	if ttl <= 0 {
		return nil, nil
	}
	held, err := s.takeLease(ctx, "sweep", min(max(ttl/5, 2*time.Second), 10*time.Minute))
	if err != nil || !held {
		return nil, err
	}
	cutoff := s.now().Add(-ttl)
	var deleted []tenant.Session
	for _, sh := range s.shards {
		idle, err := s.idle(ctx, sh, cutoff)
		if err != nil {
			return deleted, err
		}
		for _, key := range idle {
			tn, sid, _ := strings.Cut(key, ".")
			w := where{sh: sh, tenant: tn, sid: sid}
			rec, err := s.rawRecord(ctx, w) // the latest, from the leader
			if errors.Is(err, session.ErrNotFound) {
				continue
			}
			if err != nil {
				return deleted, err
			}
			if rec.Visible() {
				// Appends write the record now and then: the log says
				// when the session was last written.
				last := rec
				if err := s.rollForward(ctx, w, &last, nil); err != nil && !errors.Is(err, session.ErrNotFound) {
					return deleted, err
				}
				if !last.UpdatedAt.Before(cutoff) {
					continue
				}
			} else if !rec.UpdatedAt.Before(cutoff) && !rec.Deleted {
				continue
			}
			switch err := s.deleteAt(ctx, w, rec); {
			case err == nil:
				deleted = append(deleted, tenant.Session{Tenant: tn, ID: sid})
			case errors.Is(err, session.ErrConflict): // written to meanwhile
			default:
				return deleted, err
			}
		}
	}
	return deleted, nil
}

// idle lists the keys of shard sh's records last written before cutoff,
// or left deleted: one pass over the bucket's latest values.
func (s *Sessions) idle(ctx context.Context, sh *shard, cutoff time.Time) ([]string, error) {
	watch, err := sh.records.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, unavailable(ctx, "list sessions of "+RecordsBucket(sh.n), err)
	}
	defer watch.Stop()
	var out []string
	for {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case e, ok := <-watch.Updates():
			if !ok {
				return out, fmt.Errorf("list sessions of %s: %w: the watch ended", RecordsBucket(sh.n), session.ErrUnavailable)
			}
			if e == nil {
				return out, nil // every record seen
			}
			var r struct {
				UpdatedAt time.Time `json:"updated_at"`
				Deleted   bool      `json:"deleted"`
			}
			if json.Unmarshal(e.Value(), &r) != nil {
				continue // a record that does not decode is an operator's to look at
			}
			if r.Deleted || r.UpdatedAt.Before(cutoff) {
				out = append(out, e.Key())
			}
		}
	}
}
