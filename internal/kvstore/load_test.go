package kvstore_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/session"
)

// Issue 43: once the record is read, a load reads the log past it beside
// the messages the record names: the leader's read of where the log ends
// is held here until the read of the messages has been sent, which a load
// that waited on the one before sending the other never does.
func TestALoadReadsPastItsRecordBesideItsMessages(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	if _, err := s.Create(ctx, session.Record{SessionID: "side", Model: "gpt-4o"}, chatOf(30)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	direct := 0
	both := make(chan struct{})
	var unseen atomic.Bool
	s.BeforeRead(func(leader bool, subj string) {
		if !strings.HasSuffix(subj, ".log") {
			return
		}
		if !leader {
			mu.Lock()
			if direct++; direct == 2 { // the log past the record, and the messages
				close(both)
			}
			mu.Unlock()
			return
		}
		select {
		case <-both:
		case <-time.After(10 * time.Second):
			unseen.Store(true)
		}
	})
	sess, err := s.Load(ctx, "side", false)
	s.BeforeRead(nil)
	if err != nil || len(sess.Messages) != 61 {
		t.Fatalf("load: %v", err)
	}
	if unseen.Load() {
		t.Fatal("the messages were read only once the leader had said where the log ends")
	}
}

// Issue 43: a load's read of the log past its record asks the leader
// where the log ends beside its batched read, not after it: the batched
// reads are held here until the leader's has been sent.
func TestALoadAsksTheLeaderWhereTheLogEndsBesideItsRead(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	if _, err := s.Create(ctx, session.Record{SessionID: "end", Model: "gpt-4o"}, chatOf(5)); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{})
	var once sync.Once
	var unasked atomic.Bool
	s.BeforeRead(func(leader bool, subj string) {
		switch {
		case !strings.HasSuffix(subj, ".log"):
		case leader:
			once.Do(func() { close(asked) })
		default:
			select {
			case <-asked:
			case <-time.After(10 * time.Second):
				unasked.Store(true)
			}
		}
	})
	sess, err := s.Load(ctx, "end", false)
	s.BeforeRead(nil)
	if err != nil || sess.Record.HeadSeq != 11 || len(sess.Messages) != 11 {
		t.Fatalf("load: %v", err)
	}
	if unasked.Load() {
		t.Fatal("the leader was asked where the log ends only after the batched read")
	}
}

// What a load reads past its record (appends write it only now and then)
// comes after what the record names, in order, a message stored in chunks
// read whole; the record the load keeps holds them.
func TestALoadReadsWholeWhatTheLogHoldsPastItsRecord(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	if _, err := s.Create(ctx, session.Record{SessionID: "past", Model: "gpt-4o"}, chatOf(10)); err != nil {
		t.Fatal(err)
	}
	big := session.Message{Role: session.RoleUser, Content: session.TextContent(strings.Repeat("a long pasted log line\n", 40_000))}
	if int64(len(big.Content.Text)) <= nc.MaxPayload()/2 {
		t.Fatal("the pasted log must be stored in chunks")
	}
	later := []session.Message{{Role: session.RoleAssistant, Content: session.TextContent("go on")}, big,
		{Role: session.RoleAssistant, Content: session.TextContent("read it")}}
	for _, m := range later {
		if _, err := s.Append(ctx, "past", m); err != nil {
			t.Fatal(err)
		}
	}
	// Another process's store, whose record is the one stored.
	other, _ := kvstore.NewSessions(ctx, nc, js)
	sess, err := other.Load(ctx, "past", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(sess.Messages) != 24 || sess.Record.HeadSeq != 24 {
		t.Fatalf("loaded %d messages, head %d: want 24", len(sess.Messages), sess.Record.HeadSeq)
	}
	for i, m := range sess.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
	}
	if got := sess.Messages[22].Content.Text; got != big.Content.Text {
		t.Fatalf("the message in chunks read back as %d bytes, want %d", len(got), len(big.Content.Text))
	}
	if sess.Messages[23].Content.Text != "read it" {
		t.Fatalf("the last message: %q", sess.Messages[23].Content.Text)
	}
}
