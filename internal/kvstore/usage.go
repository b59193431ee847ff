package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/quota"
	"github.com/compactor/compactor/internal/session"
)

// Keys of the meta bucket for the tenants' quotas.
const (
	usageKey   = "usage"       // the last per-tenant usage scan (quota.Usage)
	hourPrefix = "quota.hour." // + tenant: its model use this hour (quota.Hour)
)

// Usage returns the per-tenant usage of the last scan (the meta bucket's
// key usage), scanning the records again (Tenants) when it is older than
// maxAge and this process takes the usage lease: one replica of a
// deployment scans, every maxAge at most; the others read what it wrote.
func (s *Sessions) Usage(ctx context.Context, maxAge time.Duration) (quota.Usage, error) {
	var u quota.Usage
	e, err := s.meta.Get(ctx, usageKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return u, unavailable(ctx, "read the usage", err)
	default:
		if err := json.Unmarshal(e.Value(), &u); err != nil {
			return u, fmt.Errorf("%w: the usage in %s does not decode: %v", session.ErrCorrupt, MetaBucket, err)
		}
	}
	if !u.At.IsZero() && s.now().Sub(u.At) < maxAge {
		return u, nil
	}
	held, err := s.takeLease(ctx, "usage", max(2*maxAge, 5*time.Second))
	if err != nil {
		return u, err
	}
	if !held {
		return u, nil // another replica scans
	}
	at := s.now().UTC()
	tenants, err := s.Tenants(ctx)
	if err != nil {
		return u, err
	}
	next := quota.Usage{At: at, Tenants: make(map[string]session.TenantUsage, len(tenants))}
	for _, t := range tenants {
		next.Tenants[t.Tenant] = t
	}
	b, _ := json.Marshal(next)
	if _, err := s.meta.Put(ctx, usageKey, b); err != nil {
		return next, unavailable(ctx, "write the usage", err)
	}
	return next, nil
}

// AddHour adds calls and tokens to tenant t's model use of the hour that
// starts at hour (a new hour starts from zero), by compare-and-set on the
// meta bucket's key quota.hour.<t>, and returns the use after.
func (s *Sessions) AddHour(ctx context.Context, t string, hour time.Time, calls, tokens int64) (quota.Hour, error) {
	key := hourPrefix + t
	for range casRetries {
		var h quota.Hour
		var rev uint64
		e, err := s.meta.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return h, unavailable(ctx, "read "+key, err)
		default:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &h); err != nil {
				h = quota.Hour{} // rewritten below
			}
		}
		if !h.Hour.Equal(hour) {
			if h.Hour.After(hour) {
				return h, nil // a later hour is counted already: this one is over
			}
			h = quota.Hour{Hour: hour}
		}
		if calls == 0 && tokens == 0 {
			return h, nil
		}
		h.Calls = max(h.Calls+calls, 0)
		h.Tokens = max(h.Tokens+tokens, 0)
		b, _ := json.Marshal(h)
		if rev == 0 {
			_, err = s.meta.Create(ctx, key, b)
		} else {
			_, err = s.meta.Update(ctx, key, b, rev)
		}
		var apiErr *jetstream.APIError
		if errors.Is(err, jetstream.ErrKeyExists) || (errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
			continue // another replica counted first
		}
		if err != nil {
			return h, unavailable(ctx, "write "+key, err)
		}
		return h, nil
	}
	return quota.Hour{}, fmt.Errorf("count the model use of tenant %s: %w after %d tries", t, session.ErrConflict, casRetries)
}

// replicaPrefix + holder: a replica's heartbeat (replicaBeat).
const replicaPrefix = "replica."

type replicaBeat struct {
	At time.Time `json:"at"`
	// Shared is what the replica wrote since the last usage scan.
	Shared quota.Shared `json:"shared"`
}

// Replicas writes this process's heartbeat to the meta bucket, carrying
// mine, and returns how many replicas wrote one within fresh (this one
// included): what a quota answered by each replica apart is shared by;
// and what the others' fresh heartbeats carry. Heartbeats older than ten
// times fresh (a replica gone without Leave) are deleted.
func (s *Sessions) Replicas(ctx context.Context, fresh time.Duration, mine quota.Shared) (int, []quota.Shared, error) {
	now := s.now().UTC()
	b, _ := json.Marshal(replicaBeat{At: now, Shared: mine})
	if _, err := s.meta.Put(ctx, replicaPrefix+s.holder, b); err != nil {
		return 0, nil, unavailable(ctx, "write the replica's heartbeat", err)
	}
	last := map[string]raw{} // by key: the bucket may keep history
	prefix := "$KV." + MetaBucket + "."
	_, err := s.directRange(ctx, "KV_"+MetaBucket, prefix+replicaPrefix+"*", 1, 0, func(r raw) (bool, error) {
		last[strings.TrimPrefix(r.subject, prefix)] = r
		return true, nil
	})
	if err != nil {
		return 0, nil, err
	}
	n := 0
	var gone []string
	var others []quota.Shared
	for key, r := range last {
		var beat replicaBeat
		if r.hdr.Get(hdrKVOperation) != "" || json.Unmarshal(r.data, &beat) != nil {
			continue // deleted
		}
		switch age := now.Sub(beat.At); {
		case age <= fresh:
			n++
			if key != replicaPrefix+s.holder {
				others = append(others, beat.Shared)
			}
		case age > 10*fresh:
			gone = append(gone, key)
		}
	}
	for _, key := range gone {
		_ = s.meta.Purge(ctx, key)
	}
	return max(n, 1), others, nil
}

// Leave deletes this process's heartbeat (at a clean shutdown).
func (s *Sessions) Leave(ctx context.Context) error {
	return s.meta.Purge(ctx, replicaPrefix+s.holder)
}
