// Package storetest is the conformance suite every session and breaker
// store runs: the in-memory store now, the JetStream KV store too. It checks
// the semantics the pipeline relies on, not a backend's internals.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tenant"
)

// Store is a session store as the suite drives it: the pipeline's interface
// plus what runtimes and the CLI use.
type Store interface {
	pipeline.SessionStore
	Create(ctx context.Context, rec session.Record, msgs []session.Message) (session.Record, error)
	Append(ctx context.Context, sessionID string, msgs ...session.Message) ([]session.Message, error)
	AppendWith(ctx context.Context, sessionID string, msgs []session.Message, opt session.AppendOptions) (session.Appended, error)
	Record(ctx context.Context, sessionID string) (session.Record, error)
	History(ctx context.Context, sessionID string) (msgs, compactions []session.Message, err error)
	Message(ctx context.Context, sessionID string, seq int64) (session.Message, error)
	Messages(ctx context.Context, sessionID string, sel session.Seqs) (session.Record, []session.Message, error)
	Delete(ctx context.Context, sessionID string) error
	List(ctx context.Context, opt session.ListOptions) (session.SessionPage, error)
}

// Breakers is a breaker store as the suite drives it.
type Breakers interface {
	pipeline.BreakerStore
	List(ctx context.Context) ([]session.Breaker, error)
	Page(ctx context.Context, after string, limit int) (session.BreakerPage, error)
	Delete(ctx context.Context, sessionID string) error
}

// StoreCase is one named case of the session-store suite.
type StoreCase struct {
	Name string
	Run  func(t *testing.T, f Features, newStore func(t *testing.T) Store)
}

// BreakersCase is one named case of the breaker-store suite.
type BreakersCase struct {
	Name string
	Run  func(t *testing.T, newStore func(t *testing.T) Breakers)
}

func text(s string) session.Content { return session.TextContent(s) }

func conversation(n int) []session.Message {
	out := []session.Message{{Role: session.RoleSystem, Content: text("system prompt")}}
	for i := range n {
		out = append(out, session.Message{Role: session.RoleUser, Content: text(fmt.Sprintf("question %d", i)), Tokens: 7},
			session.Message{Role: session.RoleAssistant, Content: text(fmt.Sprintf("answer %d", i)), Tokens: 7})
	}
	return out
}

func compactionFor(rec session.Record, msgs []session.Message, upTo int, prev string) session.Commit {
	id := fmt.Sprintf("comp-%s-%d", rec.SessionID, upTo)
	var seqs []int64
	for _, m := range msgs[1:upTo] {
		seqs = append(seqs, m.Seq)
	}
	return session.Commit{
		SessionID: rec.SessionID, PrevCompactionID: prev, Pinned: []int64{1}, Summarised: seqs,
		TailStartID: msgs[upTo].ID, TailStartSeq: msgs[upTo].Seq, Now: time.Now().UTC(),
		Compaction: session.Message{ID: id, Seq: msgs[upTo-1].Seq, Role: session.RoleUser, Content: text("summary"), IsCompaction: true,
			Compaction: &session.CompactionMeta{SummaryText: "summary", FromSeq: 2, ToSeq: msgs[upTo-1].Seq, TailStartSeq: msgs[upTo].Seq, Previous: prev}},
	}
}

// Features says what a store does beyond the common contract, so that a
// case that needs more is skipped, or checks the store's own bound.
type Features struct {
	// IDWindow is how many of a session's latest message ids an append's
	// ids are checked against (a repeat of an older id is a new message);
	// 0: every id.
	IDWindow int
}

// RunSessionStore runs every case of SessionCases against the store
// newStore makes (an empty one per case).
func RunSessionStore(t *testing.T, f Features, newStore func(t *testing.T) Store) {
	for _, c := range SessionCases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, f, newStore) })
	}
}

// SessionCases are the named cases of RunSessionStore.
var SessionCases = []StoreCase{
	{"create load append", caseStoreCreateLoadAppend},
	{"not found and invalid", caseStoreNotFoundAndInvalid},
	{"commit moves the tail and keeps history", caseStoreCommitMovesTheTailAndKeepsHistory},
	{"commit conflicts", caseStoreCommitConflicts},
	{"a commit planned before the session was created again is refused", caseStoreCommitOfAnEarlierIncarnation},
	{"concurrent appenders get distinct seqs", caseStoreConcurrentAppendersGetDistinctSeqs},
	{"appends racing a commit are kept", caseStoreAppendsRacingACommitAreKept},
	{"a repeated create succeeds, another is refused", caseStoreARepeatedCreateSucceedsAnotherIsRefused},
	{"appends with ids apply once", caseStoreAppendsWithIdsApplyOnce},
	{"a repeat is recognised across the id window", caseStoreIDWindow},
	{"an id stored with other content is refused", caseStoreAnIdStoredWithOtherContentIsRefused},
	{"a tool result must answer a call", caseStoreAToolResultMustAnswerACall},
	{"every call is answered before the next message", caseStoreEveryCallIsAnswered},
	{"empty content is kept as sent", caseStoreEmptyContentIsKeptAsSent},
	{"delete removes everything and repeats", caseStoreDeleteRemovesEverythingAndRepeats},
	{"prepared compactions", caseStorePreparedCompactions},
	{"a list pages through every session once, with filters", caseStoreList},
	{"two tenants with one session id do not meet", caseStoreTenantsDoNotMeet},
	{"a record counts the bytes its messages say", caseStoreRecordCountsBytes},
	{"a range of messages reads as stored, whatever a commit did", caseStoreMessagesInARange},
}

// caseStoreMessagesInARange: Messages answers the record and the messages
// of a seq range as stored (raw, summarised or not), the range clipped to
// 1..head, or the seqs listed (past the head left out); an unknown session
// is not found.
func caseStoreMessagesInARange(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	s := newStore(t)
	ctx := context.Background()
	msgs := conversation(10)
	rec, err := s.Create(ctx, session.Record{SessionID: "r", Model: "gpt-4o", ContextLimit: 1000}, msgs)
	if err != nil {
		t.Fatal(err)
	}
	all, _, _ := s.History(ctx, "r")
	if _, err := s.Commit(ctx, compactionFor(rec, all, 8, "")); err != nil {
		t.Fatal(err)
	}
	got, part, err := s.Messages(ctx, "r", session.Seqs{From: 3, To: 9})
	if err != nil || got.HeadSeq != 21 || got.TailStartSeq != 9 || len(part) != 7 {
		t.Fatalf("3..9: record %+v, %d messages, %v", got, len(part), err)
	}
	for i, m := range part {
		if m.Seq != int64(3+i) || m.Content.Text != msgs[2+i].Content.Text || m.ID == "" {
			t.Fatalf("message %d reads %+v, want seq %d %q", i, m, 3+i, msgs[2+i].Content.Text)
		}
	}
	if _, tail, err := s.Messages(ctx, "r", session.Seqs{From: 20}); err != nil || len(tail) != 2 || tail[1].Seq != 21 {
		t.Fatalf("20 to the head: %d messages, %v", len(tail), err)
	}
	if _, none, err := s.Messages(ctx, "r", session.Seqs{From: 30, To: 40}); err != nil || len(none) != 0 {
		t.Fatalf("past the head: %d messages, %v", len(none), err)
	}
	if _, some, err := s.Messages(ctx, "r", session.Seqs{Only: []int64{2, 9, 15, 99}}); err != nil || len(some) != 3 || some[0].Seq != 2 || some[1].Seq != 9 || some[2].Seq != 15 {
		t.Fatalf("seqs 2, 9, 15 and 99: %+v, %v", some, err)
	}
	if _, _, err := s.Messages(ctx, "nope", session.Seqs{From: 1, To: 2}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("an unknown session: %v", err)
	}
}

// caseStoreRecordCountsBytes: a session's record counts what its messages
// say (session.TextBytes), once per message: a repeated append adds
// nothing (a tenant's bytes_stored quota sums these).
func caseStoreRecordCountsBytes(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	msgs := conversation(2)
	var want int64
	for i := range msgs {
		want += int64(session.TextBytes(&msgs[i]))
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "b"}, msgs); err != nil {
		t.Fatal(err)
	}
	batch := []session.Message{{ID: "u-9", Role: session.RoleUser, Content: text("a question of forty-two bytes, or so.")}}
	want += int64(session.TextBytes(&batch[0]))
	for range 2 { // the second applies nothing
		a, err := s.AppendWith(ctx, "b", batch, session.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if a.Bytes != want {
			t.Fatalf("the append says the session holds %d bytes, want %d", a.Bytes, want)
		}
	}
	sess, err := s.Load(ctx, "b", false)
	if err != nil {
		t.Fatal(err)
	}
	if sess.Record.Bytes != want || want == 0 {
		t.Fatalf("record counts %d bytes, want %d", sess.Record.Bytes, want)
	}
}

func caseStoreCreateLoadAppend(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	rec, err := s.Create(ctx, session.Record{SessionID: "a", Model: "gpt-4o", ContextLimit: 1000}, conversation(3))
	if err != nil {
		t.Fatal(err)
	}
	if rec.HeadSeq != 7 {
		t.Fatalf("head seq %d, want 7", rec.HeadSeq)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "a"}, nil); !errors.Is(err, session.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	added, err := s.Append(ctx, "a", session.Message{Role: session.RoleUser, Content: text("more")})
	if err != nil || len(added) != 1 || added[0].Seq != 8 || added[0].ID == "" {
		t.Fatalf("append: %v %+v", err, added)
	}
	sess, err := s.Load(ctx, "a", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Messages) != 8 || sess.Summary != nil || sess.Record.Model != "gpt-4o" || sess.Record.ContextLimit != 1000 {
		t.Fatalf("loaded %d messages, record %+v", len(sess.Messages), sess.Record)
	}
	for i, m := range sess.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
	}
	if sess.Messages[1].Tokens != 7 {
		t.Fatal("stored token counts lost")
	}
}

func caseStoreNotFoundAndInvalid(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Load(ctx, "nope", false); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Load: %v", err)
	}
	if _, err := s.Append(ctx, "nope", session.Message{Role: session.RoleUser}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Append: %v", err)
	}
	if _, err := s.Compaction(ctx, "nope", "x"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Compaction: %v", err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "b"}, []session.Message{{Role: "robot"}}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("bad role: %v", err)
	}
	if _, err := s.Load(ctx, "b", false); !errors.Is(err, session.ErrNotFound) {
		t.Fatal("a refused create left a session behind")
	}
}

func caseStoreCommitMovesTheTailAndKeepsHistory(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	rec, _ := s.Create(ctx, session.Record{SessionID: "c"}, conversation(5))
	sess, _ := s.Load(ctx, "c", false)
	c := compactionFor(rec, sess.Messages, 7, "")
	if _, err := s.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, "c", false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Summary == nil || got.Summary.ID != c.Compaction.ID || got.Record.TailStartSeq != 8 || got.Record.CompactionID != c.Compaction.ID {
		t.Fatalf("after commit: %+v", got.Record)
	}
	if len(got.Messages) != 1+4 || got.Messages[0].Seq != 1 || got.Messages[1].Seq != 8 {
		t.Fatalf("raw messages after commit: %d", len(got.Messages))
	}
	full, _ := s.Load(ctx, "c", true)
	if len(full.Summarised) != 6 {
		t.Fatalf("history load: %d summarised, want 6", len(full.Summarised))
	}
	all, comps, _ := s.History(ctx, "c")
	if len(all) != 11 || len(comps) != 1 || all[2].SummarisedBy != c.Compaction.ID || all[8].SummarisedBy != "" {
		t.Fatalf("history: %d messages, %d compactions", len(all), len(comps))
	}
	if m, err := s.Compaction(ctx, "c", c.Compaction.ID); err != nil || m.Compaction.SummaryText != "summary" {
		t.Fatalf("Compaction: %v", err)
	}
}

func caseStoreCommitConflicts(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	rec, _ := s.Create(ctx, session.Record{SessionID: "d"}, conversation(5))
	sess, _ := s.Load(ctx, "d", false)
	first := compactionFor(rec, sess.Messages, 5, "")
	if _, err := s.Commit(ctx, first); err != nil {
		t.Fatal(err)
	}
	// The same commit again, and another built on the old state.
	if _, err := s.Commit(ctx, first); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("repeat commit: %v, want ErrConflict", err)
	}
	if _, err := s.Commit(ctx, compactionFor(rec, sess.Messages, 7, "")); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("stale commit: %v, want ErrConflict", err)
	}
	if _, comps, _ := s.History(ctx, "d"); len(comps) != 1 {
		t.Fatalf("%d compactions after conflicts, want 1", len(comps))
	}
}

// caseStoreCommitOfAnEarlierIncarnation: a compaction planned on a
// session (its record the commit's Base) is refused once the session was
// deleted and created again under its id, though the new one has no
// compaction either.
func caseStoreCommitOfAnEarlierIncarnation(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Create(ctx, session.Record{SessionID: "e"}, conversation(5)); err != nil {
		t.Fatal(err)
	}
	sess, err := s.Load(ctx, "e", false)
	if err != nil {
		t.Fatal(err)
	}
	c := compactionFor(sess.Record, sess.Messages, 5, "")
	base := sess.Record
	c.Base = &base
	if err := s.Delete(ctx, "e"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "e"}, conversation(6)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, c); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("commit planned on the session before: %v, want ErrConflict", err)
	}
	if _, comps, _ := s.History(ctx, "e"); len(comps) != 0 {
		t.Fatalf("%d compactions in the new session, want none", len(comps))
	}
	// Planned on the new one, it commits.
	sess, _ = s.Load(ctx, "e", false)
	c = compactionFor(sess.Record, sess.Messages, 5, "")
	base = sess.Record
	c.Base = &base
	if _, err := s.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
}

func caseStoreConcurrentAppendersGetDistinctSeqs(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	s.Create(ctx, session.Record{SessionID: "f"}, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if _, err := s.Append(ctx, "f", session.Message{Role: session.RoleUser, Content: text(fmt.Sprintf("w%d-%d", w, i))}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	all, _, err := s.History(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i, m := range all {
		if m.Seq != int64(i+1) || seen[m.Content.Text] {
			t.Fatalf("message %d: seq %d, %q (duplicate %v)", i, m.Seq, m.Content.Text, seen[m.Content.Text])
		}
		seen[m.Content.Text] = true
	}
	if len(all) != 40 {
		t.Fatalf("%d messages, want 40", len(all))
	}
}

func caseStoreAppendsRacingACommitAreKept(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	rec, _ := s.Create(ctx, session.Record{SessionID: "e"}, conversation(5))
	sess, _ := s.Load(ctx, "e", false)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 20 {
			if _, err := s.Append(ctx, "e", session.Message{Role: session.RoleUser, Content: text(fmt.Sprint("late ", i))}); err != nil {
				t.Error(err)
			}
		}
	}()
	go func() {
		defer wg.Done()
		if _, err := s.Commit(ctx, compactionFor(rec, sess.Messages, 7, "")); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	got, _ := s.Load(ctx, "e", false)
	if got.Record.HeadSeq != 31 || len(got.Messages) != 1+4+20 {
		t.Fatalf("head %d, %d raw messages: an append was lost", got.Record.HeadSeq, len(got.Messages))
	}
}

func caseStoreARepeatedCreateSucceedsAnotherIsRefused(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	msgs := conversation(2)
	first, err := s.Create(ctx, session.Record{SessionID: "g", Model: "gpt-4o"}, msgs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.Create(ctx, session.Record{SessionID: "g", Model: "gpt-4o"}, conversation(2))
	if err != nil || again.HeadSeq != first.HeadSeq || again.Epoch != first.Epoch {
		t.Fatalf("repeated create: %+v %v, want the first one %+v", again, err, first)
	}
	all, _, _ := s.History(ctx, "g")
	if len(all) != 5 || all[0].ID == "" {
		t.Fatalf("%d messages after a repeated create, want 5", len(all))
	}
	other := conversation(2)
	other[1].Content = text("another question")
	if _, err := s.Create(ctx, session.Record{SessionID: "g", Model: "gpt-4o"}, other); !errors.Is(err, session.ErrExists) {
		t.Fatalf("create with other content: %v, want ErrExists", err)
	}
	dup := conversation(1)
	dup[0].ID, dup[1].ID = "same", "same"
	if _, err := s.Create(ctx, session.Record{SessionID: "h"}, dup); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("ids given twice: %v, want ErrInvalid", err)
	}
}

func caseStoreAppendsWithIdsApplyOnce(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	s.Create(ctx, session.Record{SessionID: "i"}, conversation(1))
	batch := []session.Message{{ID: "u-1", Role: session.RoleUser, Content: text("hi")}, {ID: "a-1", Role: session.RoleAssistant, Content: text("hello")}}
	a, err := s.AppendWith(ctx, "i", batch, session.AppendOptions{})
	if err != nil || a.Applied() != 2 || a.HeadSeq != 5 || a.Messages[0].Seq != 4 || a.Messages[1].Seq != 5 {
		t.Fatalf("first append: %+v %v", a, err)
	}
	again, err := s.AppendWith(ctx, "i", batch, session.AppendOptions{})
	if err != nil || again.Applied() != 0 || again.HeadSeq != 5 || again.Messages[0].Seq != 4 || again.Messages[1].Seq != 5 {
		t.Fatalf("repeated append: %+v %v, want nothing applied and the stored seqs", again, err)
	}
	more := append(batch, session.Message{ID: "u-2", Role: session.RoleUser, Content: text("next")})
	part, err := s.AppendWith(ctx, "i", more, session.AppendOptions{})
	if err != nil || part.Applied() != 1 || !part.New[2] || part.Messages[2].Seq != 6 {
		t.Fatalf("append with one new id: %+v %v", part, err)
	}
	stale := int64(3)
	_, err = s.AppendWith(ctx, "i", []session.Message{{ID: "u-3", Role: session.RoleUser, Content: text("late")}}, session.AppendOptions{ExpectedHeadSeq: &stale})
	var moved *session.HeadMovedError
	if !errors.As(err, &moved) || moved.Head != 6 {
		t.Fatalf("append at a stale head: %v, want HeadMovedError with head 6", err)
	}
	// A retry of an applied append is answered whatever the head.
	if r, err := s.AppendWith(ctx, "i", batch, session.AppendOptions{ExpectedHeadSeq: &stale}); err != nil || r.Applied() != 0 {
		t.Fatalf("retry at a stale head: %+v %v", r, err)
	}
	head := int64(6)
	if r, err := s.AppendWith(ctx, "i", []session.Message{{ID: "u-3", Role: session.RoleUser, Content: text("now")}}, session.AppendOptions{ExpectedHeadSeq: &head}); err != nil || r.HeadSeq != 7 {
		t.Fatalf("append at the head: %+v %v", r, err)
	}
	if m, err := s.Message(ctx, "i", 4); err != nil || m.ID != "u-1" || m.Content.Text != "hi" {
		t.Fatalf("Message 4: %+v %v", m, err)
	}
	if _, err := s.Message(ctx, "i", 8); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Message past the head: %v", err)
	}
	all, _, _ := s.History(ctx, "i")
	if len(all) != 7 {
		t.Fatalf("%d messages, want 7", len(all))
	}
}

func caseStoreAnIdStoredWithOtherContentIsRefused(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	s.Create(ctx, session.Record{SessionID: "j"}, conversation(1))
	first := []session.Message{{ID: "u-1", Role: session.RoleUser, Content: text("book the 9:00 flight")}}
	if _, err := s.AppendWith(ctx, "j", first, session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// The same id with other text, beside a new message: refused whole.
	other := []session.Message{{ID: "u-2", Role: session.RoleUser, Content: text("and a hotel")},
		{ID: "u-1", Role: session.RoleUser, Content: text("book the 18:00 flight")}}
	_, err := s.AppendWith(ctx, "j", other, session.AppendOptions{})
	var taken *session.IDTakenError
	if !errors.Is(err, session.ErrExists) || !errors.As(err, &taken) || taken.ID != "u-1" || taken.Seq != 4 {
		t.Fatalf("append reusing an id with other content: %v, want an IDTakenError for u-1 at 4", err)
	}
	rec, _ := s.Record(ctx, "j")
	if m, _ := s.Message(ctx, "j", 4); rec.HeadSeq != 4 || m.Content.Text != "book the 9:00 flight" {
		t.Fatalf("after the refused append: head %d, message 4 %q", rec.HeadSeq, m.Content.Text)
	}
	// Another role, name or tool call under the id is other content too.
	for _, m := range []session.Message{{ID: "u-1", Role: session.RoleSystem, Content: text("book the 9:00 flight")},
		{ID: "u-1", Role: session.RoleUser, Name: "bob", Content: text("book the 9:00 flight")}} {
		if _, err := s.AppendWith(ctx, "j", []session.Message{m}, session.AppendOptions{}); !errors.Is(err, session.ErrExists) {
			t.Fatalf("append of %+v: %v, want ErrExists", m, err)
		}
	}
	// The same content as parts with other spacing is the same message.
	parts := session.Message{ID: "p-1", Role: session.RoleUser}
	if err := json.Unmarshal([]byte(`[{"type":"text","text":"look"}, {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]`), &parts.Content); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendWith(ctx, "j", []session.Message{parts}, session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]`), &parts.Content); err != nil {
		t.Fatal(err)
	}
	if a, err := s.AppendWith(ctx, "j", []session.Message{parts}, session.AppendOptions{}); err != nil || a.Applied() != 0 {
		t.Fatalf("the same parts again: %+v %v, want a repeat", a, err)
	}
}

func caseStoreAToolResultMustAnswerACall(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	call := session.Message{ID: "a-1", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{
		{ID: "call_1", Type: "function", Function: session.FunctionCall{Name: "search", Arguments: "{}"}},
		{ID: "call_2", Type: "function", Function: session.FunctionCall{Name: "search", Arguments: "{}"}}}}
	result := func(id, callID string) session.Message {
		return session.Message{ID: id, Role: session.RoleTool, ToolCallID: callID, Content: text("found it")}
	}
	orphan := []session.Message{{Role: session.RoleSystem, Content: text("sys")}, result("t-0", "call_nope")}
	if _, err := s.Create(ctx, session.Record{SessionID: "k"}, orphan); !errors.Is(err, session.ErrInvalid) || !strings.Contains(err.Error(), "call_nope") {
		t.Fatalf("create with an orphan tool result: %v, want ErrInvalid naming the call", err)
	}
	if _, err := s.Load(ctx, "k", false); !errors.Is(err, session.ErrNotFound) {
		t.Fatal("a refused create left a session behind")
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "k"}, []session.Message{{Role: session.RoleSystem, Content: text("sys")}, call}); err != nil {
		t.Fatal(err)
	}
	// Results appended one by one after their call, in their own calls.
	for i, m := range []session.Message{result("t-1", "call_1"), result("t-2", "call_2")} {
		if _, err := s.AppendWith(ctx, "k", []session.Message{m}, session.AppendOptions{}); err != nil {
			t.Fatalf("result %d: %v", i, err)
		}
	}
	// After a user message, or for a call nobody made: refused, nothing stored.
	for _, batch := range [][]session.Message{
		{result("t-3", "call_9")},
		{{ID: "u-1", Role: session.RoleUser, Content: text("next")}, result("t-4", "call_1")},
	} {
		if _, err := s.AppendWith(ctx, "k", batch, session.AppendOptions{}); !errors.Is(err, session.ErrInvalid) {
			t.Fatalf("append %+v: %v, want ErrInvalid", batch, err)
		}
	}
	if rec, _ := s.Record(ctx, "k"); rec.HeadSeq != 4 {
		t.Fatalf("head %d after refused appends, want 4", rec.HeadSeq)
	}
	// A call and its result in one append, and a retry of a stored result.
	batch := []session.Message{{ID: "a-2", Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "call_3", Type: "function", Function: session.FunctionCall{Name: "book", Arguments: "{}"}}}},
		result("t-5", "call_3")}
	if a, err := s.AppendWith(ctx, "k", batch, session.AppendOptions{}); err != nil || a.Applied() != 2 {
		t.Fatalf("call and result: %+v %v", a, err)
	}
	if a, err := s.AppendWith(ctx, "k", []session.Message{result("t-1", "call_1")}, session.AppendOptions{}); err != nil || a.Applied() != 0 {
		t.Fatalf("a stored result again: %+v %v, want a repeat", a, err)
	}
	// Nine parallel calls, their results appended one by one: the
	// call is found however many results stand between.
	many := session.Message{ID: "a-3", Role: session.RoleAssistant}
	for i := range 9 {
		many.ToolCalls = append(many.ToolCalls, session.ToolCall{ID: fmt.Sprint("p", i), Type: "function", Function: session.FunctionCall{Name: "ls", Arguments: "{}"}})
	}
	if _, err := s.AppendWith(ctx, "k", []session.Message{many}, session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		if _, err := s.AppendWith(ctx, "k", []session.Message{result(fmt.Sprint("pr-", i), fmt.Sprint("p", i))}, session.AppendOptions{}); err != nil {
			t.Fatalf("parallel result %d: %v", i, err)
		}
	}
	if _, err := s.AppendWith(ctx, "k", []session.Message{result("pr-x", "call_3")}, session.AppendOptions{}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("a result for an earlier turn's call after nine results: %v, want ErrInvalid", err)
	}
}

// Issue 42: an assistant's tool call never answered, then a user message,
// was accepted (a provider refuses such a context), and so were two calls
// with one id. Both are refused, in one append or across appends, and
// nothing is stored.
func caseStoreEveryCallIsAnswered(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	call := func(id string, calls ...string) session.Message {
		m := session.Message{ID: id, Role: session.RoleAssistant}
		for _, c := range calls {
			m.ToolCalls = append(m.ToolCalls, session.ToolCall{ID: c, Type: "function", Function: session.FunctionCall{Name: "ls", Arguments: "{}"}})
		}
		return m
	}
	result := func(id, callID string) session.Message {
		return session.Message{ID: id, Role: session.RoleTool, ToolCallID: callID, Content: text("done")}
	}
	user := func(id string) session.Message {
		return session.Message{ID: id, Role: session.RoleUser, Content: text("next")}
	}
	sys := session.Message{Role: session.RoleSystem, Content: text("sys")}
	if _, err := s.Create(ctx, session.Record{SessionID: "open"}, []session.Message{sys, call("a-0", "c0"), user("u-0")}); !errors.Is(err, session.ErrInvalid) || !strings.Contains(err.Error(), `"c0"`) {
		t.Fatalf("create with a call never answered: %v, want ErrInvalid naming it", err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "open"}, []session.Message{sys, call("a-0", "c0", "c0")}); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("create with two calls of one id: %v, want ErrInvalid", err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "open"}, []session.Message{sys, call("a-1", "c1", "c2"), result("t-1", "c1")}); err != nil {
		t.Fatal(err)
	}
	// c2 waits for its result: another message is refused, in its own
	// append or after the result in the same one.
	for _, batch := range [][]session.Message{{user("u-1")}, {call("a-2", "c3")}, {result("t-9", "c1"), user("u-1")}} {
		if _, err := s.AppendWith(ctx, "open", batch, session.AppendOptions{}); !errors.Is(err, session.ErrInvalid) || !strings.Contains(err.Error(), `"c2"`) {
			t.Fatalf("append %+v while c2 waits: %v, want ErrInvalid naming c2", batch, err)
		}
	}
	if rec, _ := s.Record(ctx, "open"); rec.HeadSeq != 3 {
		t.Fatalf("head %d after refused appends, want 3", rec.HeadSeq)
	}
	if _, err := s.AppendWith(ctx, "open", []session.Message{result("t-2", "c2"), user("u-2")}, session.AppendOptions{}); err != nil {
		t.Fatalf("the result, then a user message: %v", err)
	}
	if _, err := s.AppendWith(ctx, "open", []session.Message{call("a-3", "c4")}, session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendWith(ctx, "open", []session.Message{result("t-4", "c4")}, session.AppendOptions{}); err != nil {
		t.Fatal(err)
	}
	// The same messages again are a repeat, not a refusal.
	if a, err := s.AppendWith(ctx, "open", []session.Message{result("t-2", "c2"), user("u-2")}, session.AppendOptions{}); err != nil || a.Applied() != 0 {
		t.Fatalf("a repeat: %+v %v", a, err)
	}
	if _, err := s.AppendWith(ctx, "open", []session.Message{user("u-3")}, session.AppendOptions{}); err != nil {
		t.Fatalf("a user message after every result: %v", err)
	}
}

func caseStoreEmptyContentIsKeptAsSent(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	var msgs []session.Message
	if err := json.Unmarshal([]byte(`[{"role":"system","content":"sys"},{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":""},{"role":"assistant","content":null}]`), &msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "l"}, msgs); err != nil {
		t.Fatal(err)
	}
	for seq, want := range map[int64]string{2: `""`, 3: `""`, 4: `null`} {
		m, err := s.Message(ctx, "l", seq)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := json.Marshal(m.Content); string(got) != want {
			t.Fatalf("message %d content %s, want %s", seq, got, want)
		}
	}
	sess, _ := s.Load(ctx, "l", false)
	if got, _ := json.Marshal(sess.Messages[2].Content); string(got) != `""` {
		t.Fatalf("loaded tool content %s, want \"\"", got)
	}
}

func caseStoreDeleteRemovesEverythingAndRepeats(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	rec, _ := s.Create(ctx, session.Record{SessionID: "j"}, conversation(5))
	sess, _ := s.Load(ctx, "j", false)
	if _, err := s.Commit(ctx, compactionFor(rec, sess.Messages, 7, "")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.Delete(ctx, "j"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Load(ctx, "j", false); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Load after delete: %v", err)
	}
	if _, err := s.Compaction(ctx, "j", "comp-j-7"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("a compaction outlived its session: %v", err)
	}
	if _, err := s.Append(ctx, "j", session.Message{Role: session.RoleUser, Content: text("x")}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Append after delete: %v", err)
	}
	// The id is free again, and the old messages do not come back.
	if _, err := s.Create(ctx, session.Record{SessionID: "j"}, conversation(1)); err != nil {
		t.Fatal(err)
	}
	all, comps, _ := s.History(ctx, "j")
	if len(all) != 3 || len(comps) != 0 {
		t.Fatalf("recreated session: %d messages, %d compactions", len(all), len(comps))
	}
}

func caseStorePreparedCompactions(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	ps, ok := s.(pipeline.PreparedStore)
	if !ok {
		t.Skip("the store keeps no prepared compactions")
	}
	if _, err := ps.PutPrepared(ctx, session.PreparedCompaction{SessionID: "p", State: session.PreparedRunning}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("PutPrepared on no session: %v", err)
	}
	rec, err := s.Create(ctx, session.Record{SessionID: "p"}, conversation(3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.Prepared(ctx, "p"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("Prepared before any: %v", err)
	}
	claim, err := ps.PutPrepared(ctx, session.PreparedCompaction{SessionID: "p", State: session.PreparedRunning, HeadSeq: rec.HeadSeq, Owner: "a"})
	if err != nil || claim.Revision == 0 || claim.Epoch != rec.Epoch {
		t.Fatalf("claim: %+v %v", claim, err)
	}
	// A second claim from none loses: one preparation per session.
	if _, err := ps.PutPrepared(ctx, session.PreparedCompaction{SessionID: "p", State: session.PreparedRunning, Owner: "b"}); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("second claim: %v", err)
	}
	msg := session.Message{ID: "prep-1", Role: session.RoleUser, IsCompaction: true, Content: text("summary"),
		Compaction: &session.CompactionMeta{SummaryText: "summary", FromSeq: 2, ToSeq: 3, TailStartSeq: 4}}
	ready := claim
	ready.State, ready.Compaction = session.PreparedReady, &msg
	if ready, err = ps.PutPrepared(ctx, ready); err != nil {
		t.Fatal(err)
	}
	if _, err := ps.PutPrepared(ctx, claim); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("write at a stale revision: %v", err)
	}
	got, err := ps.Prepared(ctx, "p")
	if err != nil || got.Revision != ready.Revision || got.State != session.PreparedReady || got.Compaction == nil ||
		got.Compaction.Compaction.SummaryText != "summary" || !got.Usable(rec) {
		t.Fatalf("Prepared: %+v %v", got, err)
	}
	// A copy: changing it changes nothing stored.
	got.Compaction.Compaction.SummaryText = "changed"
	if again, _ := ps.Prepared(ctx, "p"); again.Compaction.Compaction.SummaryText != "summary" {
		t.Fatal("the store shares its prepared compaction with callers")
	}
	// Deleted with the session; a new incarnation has none.
	if err := s.Delete(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "p"}, conversation(3)); err != nil {
		t.Fatal(err)
	}
	if p, err := ps.Prepared(ctx, "p"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("a prepared compaction outlived its session: %+v %v", p, err)
	}
}

// RunBreakers runs every case of BreakerCases against the store newStore
// makes (an empty one per case).
func RunBreakers(t *testing.T, newStore func(t *testing.T) Breakers) {
	for _, c := range BreakerCases {
		t.Run(c.Name, func(t *testing.T) { c.Run(t, newStore) })
	}
}

// now is the clock of the breaker cases.
var now = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// BreakerCases are the named cases of RunBreakers.
var BreakerCases = []BreakersCase{
	{"count open reset", caseBreakersCountOpenReset},
	{"half-open probe", caseBreakersHalfopenProbe},
	{"concurrent failures count once each", caseBreakersConcurrentFailuresCountOnceEach},
	{"a request's failure counts once", caseBreakersARequestsFailureCountsOnce},
	{"one outage counts once", caseBreakersOneOutageCountsOnce},
	{"a list pages through every breaker once", caseBreakersList},
	{"two tenants' breakers of one session id do not meet", caseBreakersTenantsDoNotMeet},
}

func caseBreakersCountOpenReset(t *testing.T, newStore func(t *testing.T) Breakers) {
	ctx := context.Background()
	b := newStore(t)
	if br, err := b.Breaker(ctx, "s"); err != nil || br.Open() || br.Failures != 0 {
		t.Fatalf("fresh breaker: %+v %v", br, err)
	}
	opened := 0
	for i := 1; i <= 4; i++ {
		br, o, err := b.RecordFailure(ctx, "s", session.Failure{RequestID: fmt.Sprint("req-", i), Error: fmt.Sprint("fail ", i), MaxFailures: 3}, now)
		if err != nil {
			t.Fatal(err)
		}
		if o {
			opened++
		}
		if br.Failures != i || br.LastError != fmt.Sprint("fail ", i) {
			t.Fatalf("after %d failures: %+v", i, br)
		}
	}
	br, _ := b.Breaker(ctx, "s")
	if opened != 1 || !br.Open() || br.OpenedAt == nil {
		t.Fatalf("opened %d times, state %+v", opened, br)
	}
	list, _ := b.List(ctx)
	if len(list) != 1 || list[0].SessionID != "s" {
		t.Fatalf("List: %+v", list)
	}
	prev, err := b.Reset(ctx, "s", now)
	if err != nil || !prev.Open() {
		t.Fatalf("Reset returned %+v %v", prev, err)
	}
	if br, _ := b.Breaker(ctx, "s"); br.Open() || br.Failures != 0 {
		t.Fatalf("after reset: %+v", br)
	}
}

func caseBreakersHalfopenProbe(t *testing.T, newStore func(t *testing.T) Breakers) {
	ctx := context.Background()
	b := newStore(t)
	if _, ok, err := b.Probe(ctx, "p", time.Minute, now); err != nil || ok {
		t.Fatalf("a closed breaker let a probe through: %v %v", ok, err)
	}
	for i := range 3 {
		b.RecordFailure(ctx, "p", session.Failure{RequestID: fmt.Sprint("req-", i), Error: "x", MaxFailures: 3}, now)
	}
	if _, ok, _ := b.Probe(ctx, "p", time.Minute, now.Add(30*time.Second)); ok {
		t.Fatal("probe before the cooldown")
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ok, err := b.Probe(ctx, "p", time.Minute, now.Add(61*time.Second))
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				granted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if granted != 1 {
		t.Fatalf("%d probes granted at once, want 1", granted)
	}
	if _, ok, _ := b.Probe(ctx, "p", time.Minute, now.Add(122*time.Second)); !ok {
		t.Fatal("no probe a cooldown after the last one")
	}
	if br, _ := b.Breaker(ctx, "p"); !br.Open() || br.ProbeAt == nil {
		t.Fatalf("a probe must leave the breaker open until it succeeds: %+v", br)
	}
}

func caseBreakersConcurrentFailuresCountOnceEach(t *testing.T, newStore func(t *testing.T) Breakers) {
	ctx := context.Background()
	b := newStore(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	opened := 0
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, o, err := b.RecordFailure(ctx, "c", session.Failure{RequestID: fmt.Sprint("req-", i), Error: "x", MaxFailures: 5}, now)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			if o {
				opened++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	br, _ := b.Breaker(ctx, "c")
	if br.Failures != 10 || opened != 1 {
		t.Fatalf("failures %d opened %d, want 10 and 1", br.Failures, opened)
	}
}

func caseBreakersARequestsFailureCountsOnce(t *testing.T, newStore func(t *testing.T) Breakers) {
	ctx := context.Background()
	b := newStore(t)
	for range 3 { // one request's redeliveries
		br, o, err := b.RecordFailure(ctx, "r", session.Failure{RequestID: "req-1", Error: "x", MaxFailures: 2}, now)
		if err != nil || o || br.Failures != 1 {
			t.Fatalf("redelivered failure: %+v opened %v %v", br, o, err)
		}
	}
	br, o, _ := b.RecordFailure(ctx, "r", session.Failure{RequestID: "req-2", Error: "y", MaxFailures: 2}, now)
	if !o || br.Failures != 2 || br.OpenedBy != "req-2" {
		t.Fatalf("second request: %+v opened %v", br, o)
	}
	if err := b.Delete(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if br, _ := b.Breaker(ctx, "r"); br.Open() || br.Failures != 0 {
		t.Fatalf("after delete: %+v", br)
	}
	if err := b.Delete(ctx, "r"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
}

func caseBreakersOneOutageCountsOnce(t *testing.T, newStore func(t *testing.T) Breakers) {
	ctx := context.Background()
	b := newStore(t)
	outage := func(id string, at time.Time) (session.Breaker, bool) {
		t.Helper()
		br, o, err := b.RecordFailure(ctx, "o", session.Failure{RequestID: id, Error: "summary_failed: 503", Retryable: true, MaxFailures: 2, Window: time.Minute}, at)
		if err != nil {
			t.Fatal(err)
		}
		return br, o
	}
	for i := range 5 { // retries within the window: one failure
		if br, o := outage(fmt.Sprint("retry-", i), now.Add(time.Duration(i)*10*time.Second)); o || br.Failures != 1 {
			t.Fatalf("retry %d: %+v opened %v", i, br, o)
		}
	}
	// Another kind of failure counts whatever the window.
	br, o, _ := b.RecordFailure(ctx, "o", session.Failure{RequestID: "bad", Error: "invariant_violated: x", MaxFailures: 3}, now.Add(45*time.Second))
	if o || br.Failures != 2 {
		t.Fatalf("a failure of another kind: %+v", br)
	}
	// The window runs from the last counted outage failure.
	if br, o := outage("later", now.Add(40*time.Second+time.Minute)); !o || br.Failures != 3 || !br.Open() {
		t.Fatalf("an outage a window later: %+v opened %v", br, o)
	}
}

// A long session: an append that repeats the id of the oldest message the
// store still checks (the first, for a store that checks every id) is
// answered as applied before, and changes nothing.
func caseStoreIDWindow(t *testing.T, f Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Create(ctx, session.Record{SessionID: "w"}, conversation(1)); err != nil {
		t.Fatal(err)
	}
	var msgs []session.Message
	for i := range 300 {
		msgs = append(msgs, session.Message{ID: fmt.Sprintf("w-%03d", i), Role: session.RoleUser, Content: text(fmt.Sprintf("turn %d", i))})
	}
	for i := 0; i < len(msgs); i += 25 {
		if _, err := s.AppendWith(ctx, "w", msgs[i:i+25], session.AppendOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := s.Record(ctx, "w")
	oldest := 0 // the first appended
	if f.IDWindow > 0 {
		oldest = len(msgs) - f.IDWindow
	}
	again, err := s.AppendWith(ctx, "w", []session.Message{msgs[oldest], msgs[len(msgs)-1]}, session.AppendOptions{})
	if err != nil || again.Applied() != 0 || again.HeadSeq != rec.HeadSeq || again.Messages[0].Seq != rec.HeadSeq-int64(len(msgs)-1-oldest) {
		t.Fatalf("repeat of %s: %+v %v", msgs[oldest].ID, again, err)
	}
	if after, _ := s.Record(ctx, "w"); after.HeadSeq != rec.HeadSeq {
		t.Fatalf("head %d -> %d", rec.HeadSeq, after.HeadSeq)
	}
}

// listAll pages through a store's sessions with opt, limit a page, and
// returns what it listed and how many pages it read.
func listAll(t *testing.T, s Store, opt session.ListOptions) (map[string]session.Listed, int) {
	t.Helper()
	got := map[string]session.Listed{}
	pages := 0
	for {
		page, err := s.List(context.Background(), opt)
		if err != nil {
			t.Fatalf("List %+v: %v", opt, err)
		}
		pages++
		if len(page.Sessions) > opt.Limit {
			t.Fatalf("a page of %d sessions, limit %d", len(page.Sessions), opt.Limit)
		}
		for _, l := range page.Sessions {
			if _, twice := got[l.SessionID]; twice {
				t.Fatalf("session %s listed twice (nothing was written meanwhile)", l.SessionID)
			}
			got[l.SessionID] = l
		}
		if page.Next == "" {
			return got, pages
		}
		if pages > 100 {
			t.Fatalf("no end to the list after %d pages", pages)
		}
		opt.After = page.Next
	}
}

func caseStoreList(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	ctx := context.Background()
	s := newStore(t)
	if page, err := s.List(ctx, session.ListOptions{}); err != nil || len(page.Sessions) != 0 || page.Next != "" {
		t.Fatalf("an empty store listed %+v %v", page, err)
	}
	for i := range 25 {
		model := "gpt-4o"
		if i%2 == 1 {
			model = "claude-sonnet-4"
		}
		if _, err := s.Create(ctx, session.Record{SessionID: fmt.Sprintf("s%02d", i), Model: model}, conversation(1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "gone", Model: "gpt-4o"}, conversation(1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	// Appends after the create: a list counts them (a store that writes
	// its record now and then reads past it).
	for i := range 4 {
		if _, err := s.Append(ctx, "s03", session.Message{ID: fmt.Sprint("more-", i), Role: session.RoleUser, Content: text("more")}); err != nil {
			t.Fatal(err)
		}
	}
	rec, _ := s.Create(ctx, session.Record{SessionID: "s07", Model: "claude-sonnet-4"}, conversation(1))
	sess, _ := s.Load(ctx, "s07", false)
	if _, err := s.Commit(ctx, compactionFor(rec, sess.Messages, 2, "")); err != nil {
		t.Fatal(err)
	}

	all, pages := listAll(t, s, session.ListOptions{Limit: 7})
	if len(all) != 25 {
		t.Fatalf("listed %d sessions, want 25: %v", len(all), all)
	}
	if pages > 25/7+2 {
		t.Fatalf("%d pages of 7 for 25 sessions", pages)
	}
	if _, ok := all["gone"]; ok {
		t.Fatal("a deleted session was listed")
	}
	if l := all["s03"]; l.Messages != 7 || l.Model != "claude-sonnet-4" || l.CreatedAt.IsZero() || l.UpdatedAt.Before(l.CreatedAt) {
		t.Fatalf("s03 listed as %+v, want 7 messages (3 created, 4 appended)", l)
	}
	if l := all["s07"]; l.Compactions != 1 {
		t.Fatalf("s07 listed as %+v, want one compaction", l)
	}
	if got, _ := listAll(t, s, session.ListOptions{Limit: 3, Prefix: "s1"}); len(got) != 10 {
		t.Fatalf("prefix s1: %d sessions, want 10", len(got))
	}
	if got, _ := listAll(t, s, session.ListOptions{Limit: 100, Model: "gpt-4o"}); len(got) != 13 {
		t.Fatalf("model gpt-4o: %d sessions, want 13", len(got))
	}
	yes, no := true, false
	if got, _ := listAll(t, s, session.ListOptions{Limit: 100, Compacted: &yes}); len(got) != 1 || got["s07"].SessionID == "" {
		t.Fatalf("compacted: %v, want s07", got)
	}
	if got, _ := listAll(t, s, session.ListOptions{Limit: 100, Compacted: &no}); len(got) != 24 {
		t.Fatalf("never compacted: %d sessions, want 24", len(got))
	}
	if got, _ := listAll(t, s, session.ListOptions{Limit: 100, IdleFor: time.Hour}); len(got) != 0 {
		t.Fatalf("idle for an hour: %v, want none (all were just written)", got)
	}
	for _, bad := range []session.ListOptions{{Limit: session.MaxPageSize + 1}, {Limit: -1}, {After: "not a cursor"}, {IdleFor: -time.Second}} {
		if _, err := s.List(ctx, bad); !errors.Is(err, session.ErrInvalid) {
			t.Fatalf("List %+v: %v, want ErrInvalid", bad, err)
		}
	}
}

func caseBreakersList(t *testing.T, newStore func(t *testing.T) Breakers) {
	ctx := context.Background()
	b := newStore(t)
	if page, err := b.Page(ctx, "", 0); err != nil || len(page.Breakers) != 0 || page.Next != "" {
		t.Fatalf("no breakers, a page of %+v %v", page, err)
	}
	for i := range 12 {
		if _, _, err := b.RecordFailure(ctx, fmt.Sprintf("b%02d", i), session.Failure{RequestID: "r", Error: "x", MaxFailures: 3}, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Reset(ctx, "b05", now); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	pages := 0
	for after := ""; ; pages++ {
		page, err := b.Page(ctx, after, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Breakers) > 5 {
			t.Fatalf("a page of %d, limit 5", len(page.Breakers))
		}
		for _, br := range page.Breakers {
			if got[br.SessionID] || br.Failures != 1 {
				t.Fatalf("breaker %+v listed twice or wrong", br)
			}
			got[br.SessionID] = true
		}
		if page.Next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("no end to the pages")
		}
		after = page.Next
	}
	if len(got) != 11 || got["b05"] {
		t.Fatalf("paged through %v, want the 11 not reset", got)
	}
	list, err := b.List(ctx)
	if err != nil || len(list) != 11 || list[0].SessionID != "b00" || list[10].SessionID != "b11" {
		t.Fatalf("List: %v %+v", err, list)
	}
	if _, err := b.Page(ctx, "", session.MaxPageSize+1); !errors.Is(err, session.ErrInvalid) {
		t.Fatalf("a page over the maximum: %v", err)
	}
}

// caseStoreTenantsDoNotMeet: two tenants use the same session id; each
// sees, appends to, compacts, lists and deletes its own session only.
func caseStoreTenantsDoNotMeet(t *testing.T, _ Features, newStore func(t *testing.T) Store) {
	s := newStore(t)
	a, b := tenant.With(context.Background(), "A"), tenant.With(context.Background(), "B")
	for i, ctx := range []context.Context{a, b} {
		if _, err := s.Create(ctx, session.Record{SessionID: "same", Model: fmt.Sprint("model-", i)}, conversation(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Append(a, "same", session.Message{Role: session.RoleUser, Content: text("only A says this"), Tokens: 5}); err != nil {
		t.Fatal(err)
	}
	// Each reads its own: A's three turns and its append, B's one turn.
	for ctx, want := range map[context.Context]int{a: 1 + 2*1 + 1, b: 1 + 2*2} {
		sess, err := s.Load(ctx, "same", false)
		if err != nil {
			t.Fatal(err)
		}
		if len(sess.Messages) != want {
			t.Fatalf("%s reads %d messages, want %d", tenant.From(ctx), len(sess.Messages), want)
		}
	}
	// The default tenant has no such session; B's is not listed for A.
	if _, err := s.Record(context.Background(), "same"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("the default tenant reads another tenant's session: %v", err)
	}
	page, err := s.List(a, session.ListOptions{})
	if err != nil || len(page.Sessions) != 1 || page.Sessions[0].Model != "model-0" {
		t.Fatalf("A lists %+v (%v)", page.Sessions, err)
	}
	// A compacts and deletes its own; B's stays as it was.
	sess, _ := s.Load(a, "same", false)
	if _, err := s.Commit(a, compactionFor(sess.Record, sess.Messages, 2, "")); err != nil {
		t.Fatal(err)
	}
	if rec, _ := s.Record(b, "same"); rec.CompactionID != "" {
		t.Fatalf("A's compaction reached B's session: %+v", rec)
	}
	if err := s.Delete(a, "same"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Record(a, "same"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("A's session after its delete: %v", err)
	}
	if sess, err := s.Load(b, "same", false); err != nil || len(sess.Messages) != 5 {
		t.Fatalf("B's session after A's delete: %v", err)
	}
}

// caseBreakersTenantsDoNotMeet: two tenants' breakers of the same session
// id are apart: counted, listed, reset and deleted apart.
func caseBreakersTenantsDoNotMeet(t *testing.T, newStore func(t *testing.T) Breakers) {
	s := newStore(t)
	a, b := tenant.With(context.Background(), "A"), tenant.With(context.Background(), "B")
	for i := range 3 {
		if _, _, err := s.RecordFailure(a, "same", session.Failure{RequestID: fmt.Sprint("r", i), Error: "x", MaxFailures: 3}, now); err != nil {
			t.Fatal(err)
		}
	}
	if br, _ := s.Breaker(a, "same"); !br.Open() {
		t.Fatalf("A's breaker %+v", br)
	}
	for _, ctx := range []context.Context{b, context.Background()} {
		if br, _ := s.Breaker(ctx, "same"); br.Open() || br.Failures != 0 {
			t.Fatalf("%s sees A's breaker: %+v", tenant.From(ctx), br)
		}
		if all, err := s.List(ctx); err != nil || len(all) != 0 {
			t.Fatalf("%s lists %+v (%v)", tenant.From(ctx), all, err)
		}
		if page, err := s.Page(ctx, "", 10); err != nil || len(page.Breakers) != 0 {
			t.Fatalf("%s pages %+v (%v)", tenant.From(ctx), page, err)
		}
		if _, err := s.Reset(ctx, "same", now); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, "same"); err != nil {
			t.Fatal(err)
		}
	}
	if br, _ := s.Breaker(a, "same"); !br.Open() {
		t.Fatalf("another tenant's reset or delete reached A's breaker: %+v", br)
	}
	if all, err := s.List(a); err != nil || len(all) != 1 || all[0].SessionID != "same" {
		t.Fatalf("A lists %+v (%v)", all, err)
	}
}
