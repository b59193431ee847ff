// Package migrate moves the sessions of the store's first layout (one KV
// bucket, sessions, with a key per message: legacystore) into the sharded
// layout (kvstore). It is resumable and idempotent: each session is
// imported whole (kvstore.Sessions.Import, which takes back a half-done
// import), checked against the old copy, and only then deleted from the
// old bucket; a run stopped anywhere is finished by the next one, and a
// run with nothing left to move changes nothing. Breakers keep their
// bucket; preparations are not moved (the next request prepares again).
package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/legacystore"
	"github.com/compactor/compactor/internal/session"
)

// Report says what a run did.
type Report struct {
	// Sessions moved by this run, and their messages and compactions.
	Sessions    int `json:"sessions"`
	Messages    int `json:"messages"`
	Compactions int `json:"compactions"`
	// Already counts sessions found in the sharded store from an earlier
	// run (their old copy deleted now); Dropped counts creates and deletes
	// the old store left unfinished (invisible there, so nothing to move).
	Already int `json:"already"`
	Dropped int `json:"dropped"`
	// BucketDeleted is set when the old bucket, empty, was deleted.
	BucketDeleted bool `json:"bucket_deleted"`
}

// Pending reports whether the old layout's bucket exists and holds
// sessions.
func Pending(ctx context.Context, js jetstream.JetStream) (bool, error) {
	ids, err := legacyIDs(ctx, js)
	return len(ids) > 0, err
}

func legacyIDs(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	kv, err := js.KeyValue(ctx, legacystore.SessionsBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look for the old layout's bucket %s: %w", legacystore.SessionsBucket, err)
	}
	l, err := kv.ListKeysFiltered(ctx, "*.rec")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list the old layout's sessions: %w", err)
	}
	var ids []string
	for k := range l.Keys() {
		ids = append(ids, strings.TrimSuffix(k, ".rec"))
	}
	return ids, nil
}

// Run moves every session of the old layout into to, calling progress
// (when set) after each. The sharded store must be provisioned. When the
// old bucket ends empty it is deleted (that needs the right to delete
// streams: an admin's; without it the bucket stays, empty, and Run
// succeeds).
func Run(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, to *kvstore.Sessions, progress func(sid string, r Report)) (Report, error) {
	var r Report
	ids, err := legacyIDs(ctx, js)
	if err != nil || len(ids) == 0 {
		return r, err
	}
	from, err := legacystore.NewSessions(ctx, nc, js)
	if err != nil {
		return r, err
	}
	for _, sid := range ids {
		if err := r.one(ctx, from, to, sid); err != nil {
			return r, fmt.Errorf("migrate session %s: %w (run again to go on: what was moved stays moved)", sid, err)
		}
		if progress != nil {
			progress(sid, r)
		}
	}
	if left, err := legacyIDs(ctx, js); err == nil && len(left) == 0 {
		r.BucketDeleted = js.DeleteKeyValue(ctx, legacystore.SessionsBucket) == nil
	}
	return r, nil
}

func (r *Report) one(ctx context.Context, from *legacystore.Sessions, to *kvstore.Sessions, sid string) error {
	rec, err := from.Record(ctx, sid)
	if errors.Is(err, session.ErrNotFound) {
		// A create or delete the old store left unfinished: nothing a
		// reader ever saw.
		r.Dropped++
		return from.Delete(ctx, sid)
	}
	if err != nil {
		return err
	}
	msgs, comps, err := from.History(ctx, sid)
	if err != nil {
		return err
	}
	moved, err := to.Import(ctx, rec, msgs, comps)
	if err != nil {
		return err
	}
	if err := same(ctx, to, sid, msgs, comps); err != nil {
		return err
	}
	if moved {
		r.Sessions++
		r.Messages += len(msgs)
		r.Compactions += len(comps)
	} else {
		r.Already++
	}
	return from.Delete(ctx, sid)
}

// same checks that the sharded store holds the session as the old one
// did: every message (id, seq, content), every compaction of the chain,
// and what each summarised.
func same(ctx context.Context, to *kvstore.Sessions, sid string, msgs, comps []session.Message) error {
	got, gotComps, err := to.History(ctx, sid)
	if err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	if len(got) != len(msgs) || len(gotComps) != len(comps) {
		return fmt.Errorf("read back %d messages and %d compactions, want %d and %d", len(got), len(gotComps), len(msgs), len(comps))
	}
	for i := range msgs {
		if got[i].ID != msgs[i].ID || got[i].Seq != msgs[i].Seq || !got[i].SameAs(&msgs[i]) || got[i].Tokens != msgs[i].Tokens {
			return fmt.Errorf("message %d reads back otherwise", msgs[i].Seq)
		}
	}
	for i := range comps {
		if gotComps[i].ID != comps[i].ID || !gotComps[i].SameAs(&comps[i]) {
			return fmt.Errorf("compaction %s reads back otherwise", comps[i].ID)
		}
	}
	return nil
}
