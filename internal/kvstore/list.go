package kvstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// hdrKVOperation marks a KV delete or purge (its message has no value).
const hdrKVOperation = "KV-Operation"

// A list's cursor: where the next page starts, the shard and the stream
// sequence in its records bucket.
func listCursor(sh int, seq uint64) string { return fmt.Sprintf("%d.%d", sh, seq) }

func parseListCursor(c string, shards int) (int, uint64, error) {
	if c == "" {
		return 0, 1, nil
	}
	a, b, ok := strings.Cut(c, ".")
	sh, err1 := strconv.Atoi(a)
	seq, err2 := strconv.ParseUint(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || sh < 0 || sh >= shards || seq == 0 {
		return 0, 0, fmt.Errorf("%w: cursor %q is not one a list answered", session.ErrInvalid, c)
	}
	return sh, seq, nil
}

// List returns a page of sessions: each shard's records in the order they
// were last written, read in batches (a direct get of many records at
// once, which any replica may answer), the page's sessions rolled forward
// over their logs so that their counts and times are current. A page may
// hold fewer sessions than asked when the filters drop some; Next is
// empty on the last.
func (s *Sessions) List(ctx context.Context, opt session.ListOptions) (session.SessionPage, error) {
	page := session.SessionPage{Sessions: []session.Listed{}}
	if err := opt.Check(); err != nil {
		return page, err
	}
	sh, from, err := parseListCursor(opt.After, len(s.shards))
	if err != nil {
		return page, err
	}
	now := s.now()
	for sh < len(s.shards) && len(page.Sessions) < opt.Limit {
		bucket := RecordsBucket(sh)
		prefix := "$KV." + bucket + "."
		var found []record
		var wheres []where
		full := false
		last, err := s.directRange(ctx, "KV_"+bucket, prefix+tenant.From(ctx)+".*", from, 0, func(r raw) (bool, error) {
			if r.hdr.Get(hdrKVOperation) != "" {
				return true, nil // a deleted record
			}
			tn, sid, _ := strings.Cut(strings.TrimPrefix(r.subject, prefix), ".")
			rec, err := decodeRecord(sid, r)
			if err != nil || !rec.Visible() || !opt.Keep(session.ListedOf(rec.Record), now) {
				// The record's updated_at is never later than the
				// session's: one the idle filter drops now, it drops
				// after rolling forward too. An undecodable record is the
				// sweep's and the operator's, not a list's.
				return true, nil
			}
			found = append(found, rec)
			wheres = append(wheres, where{sh: s.shards[sh], tenant: tn, sid: sid})
			full = len(page.Sessions)+len(found) >= opt.Limit
			return !full, nil
		})
		if err != nil {
			return session.SessionPage{Sessions: []session.Listed{}}, err
		}
		for i := range found {
			rec := found[i]
			switch err := s.rollForward(ctx, wheres[i], &rec, nil); {
			case err == nil:
			case errors.Is(err, errStale), errors.Is(err, session.ErrNotFound):
				rec = found[i] // recreated or deleted meanwhile: as the record says
			default:
				return session.SessionPage{Sessions: []session.Listed{}}, err
			}
			if l := session.ListedOf(rec.Record); opt.Keep(l, now) {
				page.Sessions = append(page.Sessions, l)
			}
		}
		if full {
			from = last + 1
		} else {
			sh, from = sh+1, 1
		}
	}
	if sh < len(s.shards) {
		page.Next = listCursor(sh, from)
	}
	return page, nil
}

// Tenants returns what the store holds for each tenant that has sessions,
// ordered by tenant (the default tenant is "_"): it reads every record
// once, in batches. A record is a checkpoint (written every 64 messages,
// 16 KB of text or a minute), so the messages and bytes it counts may be
// that far behind a session's head.
func (s *Sessions) Tenants(ctx context.Context) ([]session.TenantUsage, error) {
	by := map[string]*session.TenantUsage{}
	for sh := range s.shards {
		bucket := RecordsBucket(sh)
		prefix := "$KV." + bucket + "."
		_, err := s.directRange(ctx, "KV_"+bucket, prefix+"*.*", 1, 0, func(r raw) (bool, error) {
			if r.hdr.Get(hdrKVOperation) != "" {
				return true, nil // a deleted record
			}
			tn, sid, _ := strings.Cut(strings.TrimPrefix(r.subject, prefix), ".")
			rec, err := decodeRecord(sid, r)
			if err != nil || !rec.Visible() {
				return true, nil // the sweep's and the operator's (as for a list)
			}
			u := by[tn]
			if u == nil {
				u = &session.TenantUsage{Tenant: tn}
				by[tn] = u
			}
			u.Sessions++
			u.Messages += rec.HeadSeq
			u.Bytes += rec.Bytes
			u.Compactions += rec.Compactions
			if rec.UpdatedAt.After(u.UpdatedAt) {
				u.UpdatedAt = rec.UpdatedAt
			}
			return true, nil
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]session.TenantUsage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b session.TenantUsage) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out, nil
}
