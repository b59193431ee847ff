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

// loadHeld creates a session of msgs in a store of its own and loads it
// with each read of its log by the leader (heldByLeader) or each batched
// one (else) held until need reads of the other kind have been sent; it
// reports whether one gave up waiting (after 10 s).
func loadHeld(t *testing.T, msgs []session.Message, heldByLeader bool, need int) (*session.Session, bool) {
	t.Helper()
	nc, js := jetStream(t)
	s, _ := kvstore.NewSessions(context.Background(), nc, js)
	if _, err := s.Create(context.Background(), session.Record{SessionID: "held", Model: "gpt-4o"}, msgs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := 0
	open := make(chan struct{})
	var gaveUp atomic.Bool
	s.BeforeRead(func(leader bool, subj string) {
		switch {
		case !strings.HasSuffix(subj, ".log"):
		case leader != heldByLeader:
			mu.Lock()
			if seen++; seen == need {
				close(open)
			}
			mu.Unlock()
		default:
			select {
			case <-open:
			case <-time.After(10 * time.Second):
				gaveUp.Store(true)
			}
		}
	})
	defer s.BeforeRead(nil)
	sess, err := s.Load(context.Background(), "held", false)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return sess, gaveUp.Load()
}

// Issue 43: once the record is read, a load reads the log past it beside
// the messages the record names: the leader's read of where the log ends
// is held here until the batched reads of both have been sent, which a
// load that waited on the one before sending the other never does.
func TestALoadReadsPastItsRecordBesideItsMessages(t *testing.T) {
	sess, gaveUp := loadHeld(t, chatOf(30), true, 2)
	if len(sess.Messages) != 61 {
		t.Fatalf("loaded %d messages, want 61", len(sess.Messages))
	}
	if gaveUp {
		t.Fatal("the messages were read only once the leader had said where the log ends")
	}
}

// Issue 43: a load's read of the log past its record asks the leader
// where the log ends beside its batched read, not after it: the batched
// reads are held here until the leader's has been sent.
func TestALoadAsksTheLeaderWhereTheLogEndsBesideItsRead(t *testing.T) {
	sess, gaveUp := loadHeld(t, chatOf(5), false, 1)
	if sess.Record.HeadSeq != 11 || len(sess.Messages) != 11 {
		t.Fatalf("loaded head %d, %d messages: want 11", sess.Record.HeadSeq, len(sess.Messages))
	}
	if gaveUp {
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
