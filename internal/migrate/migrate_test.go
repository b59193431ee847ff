package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/legacystore"
	"github.com/compactor/compactor/internal/migrate"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

func chat(n int) []session.Message {
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a support agent.")}}
	for i := range n {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d about order ORD-%d and its invoice", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("order ORD-%d ships on day %d; the invoice is sent", i, i%28+1))})
	}
	return msgs
}

// A store written by the first layout's code (legacystore's writer, as
// it was at dfd368a, before it was dropped: testdata/first-layout.jsonl.gz
// is its bucket's stream, value for value at its stream sequence, with
// its headers): six sessions of a chat, appended to, three compacted
// twice, one with a message over max_payload (in chunks). migrate moves
// every session, message for message and compaction for compaction; a
// run stopped after one session is finished by the next; a third run
// moves nothing; the old bucket is gone, and the pipeline goes on
// compacting a migrated session where it stopped.
func TestMigrateTheFirstLayout(t *testing.T) {
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	loadFirstLayout(t, js, "testdata/first-layout.jsonl.gz")
	old, err := legacystore.NewSessions(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	counter, _ := tokens.ForEncoding("o200k_base")
	// The breakers bucket is shared by both layouts.
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Shards: 3}); err != nil {
		t.Fatal(err)
	}
	breakers, _ := kvstore.NewBreakers(ctx, nc, js)
	cfg := pipeline.DefaultConfig()
	want := map[string][]session.Message{}
	for i := range 6 {
		sid := fmt.Sprintf("s%d", i)
		msgs, comps, err := old.History(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		if len(comps) != map[bool]int{true: 2, false: 0}[i%2 == 0] || len(msgs) < 41+2*i {
			t.Fatalf("%s reads as %d messages and %d compactions", sid, len(msgs), len(comps))
		}
		want[sid] = append(msgs, comps...)
	}
	if m := want["s1"][43]; m.ID != "huge" || m.Seq != 44 || len(m.Content.Text) != 1_500_000 {
		t.Fatalf("s1's large message reads as %s (%d), %d bytes", m.ID, m.Seq, len(m.Content.Text))
	}
	store, err := kvstore.NewSessions(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := migrate.Pending(ctx, js); err != nil || !pending {
		t.Fatalf("pending %v %v, want the old sessions found", pending, err)
	}

	// A run stopped after its first session.
	stop, cancel := context.WithCancel(ctx)
	r, err := migrate.Run(stop, nc, js, store, func(string, migrate.Report) { cancel() })
	if err == nil || r.Sessions != 1 {
		t.Fatalf("a stopped run: %+v %v", r, err)
	}
	r, err = migrate.Run(ctx, nc, js, store, nil)
	if err != nil || r.Sessions != 5 || !r.BucketDeleted {
		t.Fatalf("the run after it: %+v %v", r, err)
	}
	if pending, err := migrate.Pending(ctx, js); err != nil || pending {
		t.Fatalf("still pending: %v %v", pending, err)
	}
	if r, err := migrate.Run(ctx, nc, js, store, nil); err != nil || r != (migrate.Report{}) {
		t.Fatalf("a run with nothing to move: %+v %v", r, err)
	}
	for sid, w := range want {
		msgs, comps, err := store.History(ctx, sid)
		if err != nil {
			t.Fatalf("%s: %v", sid, err)
		}
		got := append(msgs, comps...)
		if len(got) != len(w) {
			t.Fatalf("%s: %d messages and compactions, want %d", sid, len(got), len(w))
		}
		for i := range w {
			if got[i].ID != w[i].ID || got[i].Seq != w[i].Seq || !got[i].SameAs(&w[i]) || got[i].SummarisedBy != w[i].SummarisedBy {
				t.Fatalf("%s: item %d reads back otherwise: %s/%d by %q, want %s/%d by %q", sid, i, got[i].ID, got[i].Seq, got[i].SummarisedBy, w[i].ID, w[i].Seq, w[i].SummarisedBy)
			}
		}
	}
	// The pipeline goes on where the old layout stopped.
	svc, _ := pipeline.New(store, breakers, extractive.New(counter), cfg)
	before, _ := store.Record(ctx, "s0")
	if _, err := store.Append(ctx, "s0", chat(30)[1:]...); err != nil {
		t.Fatal(err)
	}
	res, err := svc.Compact(ctx, pipeline.Request{ID: "after", SessionID: "s0", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("compact after the migration: %v %+v", err, res)
	}
	after, _ := store.Record(ctx, "s0")
	if after.Compactions != before.Compactions+1 || after.Epoch != before.Epoch {
		t.Fatalf("compactions %d -> %d", before.Compactions, after.Compactions)
	}
	if m, err := store.Message(ctx, "s1", 44); err != nil || m.ID != "huge" || m.Content.Text != want["s1"][43].Content.Text {
		t.Fatalf("the large message: %v", err)
	}
	if _, err := old.Record(ctx, "s0"); !errors.Is(err, session.ErrNotFound) && err == nil {
		t.Fatal("the old copy is still there")
	}
}
