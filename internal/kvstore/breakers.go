package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// Breakers is the breaker store on the compaction_breakers bucket, one key
// per session; every change is a compare-and-set on the key's revision, so
// replicas share one count and exactly one of them opens a breaker. A
// breaker is read from the stream leader: whether it is open decides
// whether a request calls a model.
type Breakers struct {
	nc  *nats.Conn
	kv  jetstream.KeyValue
	mux *batchMux
}

// NewBreakers binds the provisioned breakers bucket.
func NewBreakers(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*Breakers, error) {
	kv, err := js.KeyValue(ctx, BreakersBucket)
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", BreakersBucket, err)
	}
	mux, err := newBatchMux(nc)
	if err != nil {
		return nil, err
	}
	return &Breakers{nc: nc, kv: kv, mux: mux}, nil
}

func closed(sid string) session.Breaker {
	return session.Breaker{SessionID: sid, State: session.BreakerClosed}
}

// breakerKey is the key of a breaker of ctx's tenant: the session id for
// the default tenant (where breakers always were), <tenant>.<id> for
// another (a session id has no '.').
func breakerKey(ctx context.Context, sid string) (string, error) {
	if err := checkID(sid); err != nil {
		return "", err
	}
	if t := tenant.From(ctx); t != tenant.Default {
		return tenant.Key(t, sid), nil
	}
	return sid, nil
}

func (b *Breakers) get(ctx context.Context, sid string) (session.Breaker, error) {
	key, err := breakerKey(ctx, sid)
	if err != nil {
		return session.Breaker{}, err
	}
	v, err := kvLeaderGet(ctx, b.nc, BreakersBucket, key)
	if errors.Is(err, session.ErrNotFound) {
		return closed(sid), nil
	}
	if err != nil {
		return session.Breaker{}, err
	}
	var br session.Breaker
	if err := json.Unmarshal(v.data, &br); err != nil {
		return session.Breaker{}, fmt.Errorf("breaker %s: %w: %v", sid, session.ErrCorrupt, err)
	}
	br.Revision = v.seq
	return br, nil
}

// update applies change with compare-and-set, re-reading on a lost race.
func (b *Breakers) update(ctx context.Context, sid string, change func(*session.Breaker) bool) (session.Breaker, bool, error) {
	for range casRetries {
		br, err := b.get(ctx, sid)
		if err != nil {
			return session.Breaker{}, false, err
		}
		next := br
		if !change(&next) {
			return br, false, nil
		}
		v, _ := json.Marshal(next)
		key, _ := breakerKey(ctx, sid) // (checked by get)
		if br.Revision == 0 {
			_, err = b.kv.Create(ctx, key, v) // (over a reset's delete marker too)
		} else {
			_, err = b.kv.Update(ctx, key, v, br.Revision)
		}
		if err == nil {
			return next, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return session.Breaker{}, false, unavailable(ctx, "breaker "+sid, err)
		}
	}
	return session.Breaker{}, false, fmt.Errorf("breaker %s: %w after %d tries", sid, session.ErrConflict, casRetries)
}

// Breaker implements pipeline.BreakerStore.
func (b *Breakers) Breaker(ctx context.Context, sid string) (session.Breaker, error) {
	return b.get(ctx, sid)
}

// RecordFailure implements pipeline.BreakerStore.
func (b *Breakers) RecordFailure(ctx context.Context, sid string, f session.Failure, now time.Time) (session.Breaker, bool, error) {
	opened := false
	br, _, err := b.update(ctx, sid, func(br *session.Breaker) bool {
		var counted bool
		counted, opened = br.Fail(f, now)
		return counted
	})
	return br, opened, err
}

// Probe implements pipeline.BreakerStore.
func (b *Breakers) Probe(ctx context.Context, sid string, cooldown time.Duration, now time.Time) (session.Breaker, bool, error) {
	return b.update(ctx, sid, func(br *session.Breaker) bool {
		if !br.ProbeDue(cooldown, now) {
			return false
		}
		t := now.UTC()
		br.ProbeAt = &t
		return true
	})
}

// Reset implements pipeline.BreakerStore: it deletes the breaker at the
// revision read, reading again when another writer moved it meanwhile.
func (b *Breakers) Reset(ctx context.Context, sid string, _ time.Time) (session.Breaker, error) {
	for range casRetries {
		br, err := b.get(ctx, sid)
		if err != nil || br.Revision == 0 {
			return br, err
		}
		key, _ := breakerKey(ctx, sid)
		err = b.kv.Delete(ctx, key, jetstream.LastRevision(br.Revision))
		if err == nil {
			return br, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return session.Breaker{}, unavailable(ctx, "reset breaker "+sid, err)
		}
	}
	return session.Breaker{}, fmt.Errorf("reset breaker %s: %w after %d tries", sid, session.ErrConflict, casRetries)
}

// Delete removes the session's breaker and its history (a session deleted
// on request leaves nothing); deleting none is not an error.
func (b *Breakers) Delete(ctx context.Context, sid string) error {
	key, err := breakerKey(ctx, sid)
	if err != nil {
		return err
	}
	if err := b.kv.Purge(ctx, key); err != nil {
		return unavailable(ctx, "delete breaker "+sid, err)
	}
	return nil
}

// List returns every stored breaker, ordered by session id, read a page
// at a time.
func (b *Breakers) List(ctx context.Context) ([]session.Breaker, error) {
	var out []session.Breaker
	for after := ""; ; {
		page, err := b.Page(ctx, after, session.MaxPageSize)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Breakers...)
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out, nil
}

// Page returns up to limit breakers (0: session.DefaultPageSize) in the
// order they were last written, after the cursor a previous page answered
// ("" for the first), read in batches: a direct get of many keys at once,
// which any replica may answer. Next is empty on the last page.
func (b *Breakers) Page(ctx context.Context, after string, limit int) (session.BreakerPage, error) {
	page := session.BreakerPage{Breakers: []session.Breaker{}}
	opt := session.ListOptions{Limit: limit}
	if err := opt.Check(); err != nil {
		return page, err
	}
	from := uint64(1)
	if after != "" {
		seq, err := strconv.ParseUint(after, 10, 64)
		if err != nil || seq == 0 {
			return page, fmt.Errorf("%w: cursor %q is not one a list answered", session.ErrInvalid, after)
		}
		from = seq
	}
	// ctx's tenant's: the default tenant's keys are session ids alone.
	prefix := "$KV." + BreakersBucket + "."
	if t := tenant.From(ctx); t != tenant.Default {
		prefix += t + "."
	}
	full := false
	last, err := b.mux.directRange(ctx, "KV_"+BreakersBucket, prefix+"*", from, 0, func(r raw) (bool, error) {
		if r.hdr.Get(hdrKVOperation) != "" {
			return true, nil // reset or deleted
		}
		sid := strings.TrimPrefix(r.subject, prefix)
		var br session.Breaker
		if err := json.Unmarshal(r.data, &br); err != nil {
			return false, fmt.Errorf("breaker %s: %w: %v", sid, session.ErrCorrupt, err)
		}
		br.Revision = r.seq
		page.Breakers = append(page.Breakers, br)
		full = len(page.Breakers) >= opt.Limit
		return !full, nil
	})
	if err != nil {
		return session.BreakerPage{Breakers: []session.Breaker{}}, unavailable(ctx, "list breakers", err)
	}
	if full {
		page.Next = strconv.FormatUint(last+1, 10)
	}
	return page, nil
}
