package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/tokens"
)

func chatOf(n int) []session.Message {
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a support agent.")}}
	for i := range n {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d about order ORD-%d", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("order ORD-%d ships on day %d", i, i%28+1))})
	}
	return msgs
}

// keysOf lists every subject a session has in the store's streams (its
// record and its data).
func keysOf(t *testing.T, s *kvstore.Sessions, js jetstream.JetStream, sid string) []string {
	t.Helper()
	ctx := context.Background()
	_, bucket, key, data := s.Place(sid)
	var out []string
	for stream, filter := range map[string]string{"KV_" + bucket: "$KV." + bucket + "." + key, kvstore.DataStream(shardOf(s, sid)): data + ">"} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			t.Fatal(err)
		}
		for subj := range info.State.Subjects {
			out = append(out, subj)
		}
	}
	return out
}

func shardOf(s *kvstore.Sessions, sid string) int {
	n, _, _, _ := s.Place(sid)
	return n
}

var errLost = fmt.Errorf("connection reset: %w", session.ErrUnavailable)

// Issue 11, first defect: a create that fails half-way leaves nothing (here
// a create too large for one atomic write, failing at its second write):
// not the record, not a message; the id is free again.
func TestFailedCreateLeavesNothing(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	var records atomic.Int64
	s.FailWrites(func(subj string) error {
		if kvstore.IsRecord(subj) && records.Add(1) == 2 {
			return errLost
		}
		return nil
	})
	_, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o"}, chatOf(600)) // 1,201 messages: the record, the log, the record
	if !errors.Is(err, session.ErrUnavailable) {
		t.Fatalf("create: %v, want the write's failure", err)
	}
	if _, err := s.Record(ctx, "big"); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("after a failed create: %v, want not found", err)
	}
	if keys := keysOf(t, s, js, "big"); len(keys) != 0 {
		t.Fatalf("a failed create left %d keys, e.g. %v", len(keys), keys[:min(3, len(keys))])
	}
	s.FailWrites(nil)
	if _, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o"}, chatOf(3)); err != nil {
		t.Fatalf("the id is not free after a failed create: %v", err)
	}
}

// When taking a failed create back fails too (the server is gone), what
// is left is invisible, and the same create again finishes it: every
// message once, in order. Another content is refused meanwhile.
func TestInterruptedCreateIsFinishedByItsRetry(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	var records atomic.Int64
	s.FailWrites(func(subj string) error {
		if kvstore.IsRecord(subj) && records.Add(1) >= 2 {
			return errLost // the second write, and the delete after it
		}
		return nil
	})
	msgs := chatOf(600)
	if _, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o"}, msgs); !errors.Is(err, session.ErrUnavailable) {
		t.Fatalf("create: %v", err)
	}
	s.FailWrites(nil)
	if _, err := s.Load(ctx, "big", false); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("a half-written session is visible: %v", err)
	}
	if _, err := s.Append(ctx, "big", session.Message{Role: session.RoleUser, Content: session.TextContent("x")}); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("append to a half-written session: %v", err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o"}, chatOf(2)); !errors.Is(err, session.ErrExists) {
		t.Fatalf("another create over a half-written one: %v, want ErrExists", err)
	}
	rec, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o"}, msgs)
	if err != nil || rec.HeadSeq != int64(len(msgs)) || rec.Pending {
		t.Fatalf("the retried create: %+v %v", rec, err)
	}
	all, _, err := s.History(ctx, "big")
	if err != nil || len(all) != len(msgs) {
		t.Fatalf("%d messages (%v), want %d", len(all), err, len(msgs))
	}
	ids := map[string]bool{}
	for i, m := range all {
		if m.Seq != int64(i+1) || m.Content.Text != msgs[i].Content.Text || ids[m.ID] {
			t.Fatalf("message %d: seq %d %q (id seen %v)", i, m.Seq, m.Content.Text, ids[m.ID])
		}
		ids[m.ID] = true
	}
	// And once more: the same create answers the session, unchanged.
	if again, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o"}, msgs); err != nil || again.Revision != rec.Revision {
		t.Fatalf("repeated create: %+v %v", again, err)
	}
}

// Issue 11, first defect on one node: a message over max_payload (here
// 1.5 MB of log, as a tool result) is stored in chunks, read back whole,
// compacted, and deleted with its session.
func TestMessageOverMaxPayload(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	b, _ := kvstore.NewBreakers(ctx, nc, js)
	var log strings.Builder
	for i := 0; log.Len() < 1_500_000; i++ {
		fmt.Fprintf(&log, "2026-12-03T10:%02d:%02dZ worker-%d processed batch %d: ok\n", i/60%60, i%60, i%7, i)
	}
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a build agent.")},
		{Role: session.RoleUser, Content: session.TextContent("why did the nightly job fail?")},
		{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "call_1", Type: "function", Function: session.FunctionCall{Name: "read_log", Arguments: `{"path":"/var/log/nightly.log"}`}}}},
		{Role: session.RoleTool, ToolCallID: "call_1", Content: session.TextContent(log.String())},
	}
	msgs = append(msgs, chatOf(20)[1:]...)
	if int64(len(log.String())) <= nc.MaxPayload() {
		t.Fatal("the log must be over max_payload")
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "logs", Model: "gpt-4o", ContextLimit: 4000}, msgs); err != nil {
		t.Fatal(err)
	}
	m, err := s.Message(ctx, "logs", 4)
	if err != nil || m.Content.Text != log.String() || m.ToolCallID != "call_1" {
		t.Fatalf("the large message read back: %d bytes, %v", len(m.Content.Text), err)
	}
	counter, _ := tokens.ForEncoding("o200k_base")
	svc, _ := pipeline.New(s, b, extractive.New(counter), pipeline.DefaultConfig())
	res, err := svc.Compact(ctx, pipeline.Request{ID: "r", SessionID: "logs", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("compact: %v %+v", err, res)
	}
	all, _, err := s.History(ctx, "logs")
	if err != nil || all[3].Content.Text != log.String() || all[3].SummarisedBy != res.CompactionMessageID {
		t.Fatalf("history keeps the original: %v", err)
	}
	if err := s.Delete(ctx, "logs"); err != nil {
		t.Fatal(err)
	}
	if keys := keysOf(t, s, js, "logs"); len(keys) != 0 {
		t.Fatalf("delete left %v", keys)
	}
}

// Issue 11, seventh defect: a record that does not decode is corrupt state
// (not a transient error), and a delete still clears it.
func TestCorruptRecord(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	_, bucket, key, _ := s.Place("bad")
	kv, _ := js.KeyValue(ctx, bucket)
	if _, err := kv.Put(ctx, key, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "bad", false); !errors.Is(err, session.ErrCorrupt) || errors.Is(err, session.ErrUnavailable) {
		t.Fatalf("Load: %v, want ErrCorrupt", err)
	}
	if err := s.Delete(ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "bad", false); !errors.Is(err, session.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// Sweep deletes the sessions nobody wrote to within the TTL, of every
// tenant, keeps the others, and a session written to after it was read as
// idle is kept.
func TestSweepDeletesIdleSessions(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	tenantA := tenant.With(ctx, "A")
	s, _ := kvstore.NewSessions(ctx, nc, js)
	now := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	s.SetClock(func() time.Time { return now })
	for _, c := range []context.Context{ctx, tenantA} {
		for _, sid := range []string{"idle", "busy"} {
			if _, err := s.Create(c, session.Record{SessionID: sid}, chatOf(2)); err != nil {
				t.Fatal(err)
			}
		}
	}
	now = now.Add(50 * time.Minute)
	for _, c := range []context.Context{ctx, tenantA} {
		if _, err := s.Append(c, "busy", session.Message{Role: session.RoleUser, Content: session.TextContent("still here")}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(20 * time.Minute) // idle for 70 min, busy for 20
	deleted, err := s.Sweep(ctx, time.Hour)
	slices.SortFunc(deleted, func(a, b tenant.Session) int { return strings.Compare(a.Tenant, b.Tenant) })
	want := []tenant.Session{{Tenant: "A", ID: "idle"}, {Tenant: tenant.Default, ID: "idle"}}
	if err != nil || !slices.Equal(deleted, want) {
		t.Fatalf("swept %v (%v), want %v", deleted, err, want)
	}
	if keys := keysOf(t, s, js, "idle"); len(keys) != 0 {
		t.Fatalf("sweep left %v", keys)
	}
	for _, c := range []context.Context{ctx, tenantA} {
		if _, err := s.Record(c, "busy"); err != nil {
			t.Fatalf("a session in use was swept: %v", err)
		}
		if _, err := s.Record(c, "idle"); !errors.Is(err, session.ErrNotFound) {
			t.Fatalf("an idle session was kept: %v", err)
		}
	}
	if again, _ := s.Sweep(ctx, time.Hour); len(again) != 0 {
		t.Fatalf("second sweep deleted %v", again)
	}
}

// provisionR3 provisions R3 buckets on a fresh cluster (which may still be
// placing its first assets).
func provisionR3(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	var err error
	for range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Replicas: 3})
		cancel()
		if err == nil {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatal(err)
}

// staleReplicas adds read replicas of every shard's data stream that
// are always behind: a mirror with mirror_direct answers direct gets for
// the stream beside its replicas (about half of them here), and this one
// holds only preparations, never a log entry, a chunk or a compaction, as
// a follower that has not yet applied the writes. A lagging follower is a
// matter of timing; this one is behind every time it answers.
func staleReplicas(t *testing.T, js jetstream.JetStream, replicas, shards int) {
	t.Helper()
	for n := range shards {
		_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: fmt.Sprintf("STALE_%d", n), Replicas: replicas,
			MirrorDirect: true, AllowDirect: true, Mirror: &jetstream.StreamSource{Name: kvstore.DataStream(n), FilterSubject: fmt.Sprintf("sessions.%d.*.*.prep", n)}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 11, first defect on a cluster: with R3 buckets, what one node
// acknowledged is what the next read sees through any other node. A direct
// get is answered by any replica, and a follower may be behind (here one
// on each node always is, staleReplicas): the record is read from the
// leader, and what a replica lacks is read again from it. 16 runtimes each
// create sessions through one node and at once read, append and repeat the
// create through the others: never a not found, never an exists, never a
// lost message.
func TestReadYourWritesOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a three-node cluster")
	}
	c := natstest.Cluster(t)
	var stores []*kvstore.Sessions
	for i := range 3 {
		nc, js := natstest.ConnectURL(t, c.URL(i))
		if i == 0 {
			provisionR3(t, js)
			staleReplicas(t, js, 3, 3)
		}
		s, err := kvstore.NewSessions(context.Background(), nc, js)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 15 {
				sid := fmt.Sprintf("s%d-%d", w, n)
				a, b, cc := stores[(w+n)%3], stores[(w+n+1)%3], stores[(w+n+2)%3]
				msgs := chatOf(3)
				if _, err := a.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o"}, msgs); err != nil {
					t.Errorf("%s: create: %v", sid, err)
					return
				}
				if sess, err := b.Load(ctx, sid, false); err != nil || len(sess.Messages) != 7 {
					t.Errorf("%s: read through another node: %v", sid, err)
					return
				}
				if _, err := cc.Append(ctx, sid, session.Message{ID: "u-" + sid, Role: session.RoleUser, Content: session.TextContent("next")}); err != nil {
					t.Errorf("%s: append through a third node: %v", sid, err)
					return
				}
				if _, err := b.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o"}, msgs); err != nil {
					t.Errorf("%s: the same create again: %v", sid, err)
					return
				}
				a2, err := a.AppendWith(ctx, sid, []session.Message{{ID: "u-" + sid, Role: session.RoleUser, Content: session.TextContent("next")}}, session.AppendOptions{})
				if err != nil || a2.Applied() != 0 || a2.HeadSeq != 8 {
					t.Errorf("%s: the append again: %+v %v", sid, a2, err)
					return
				}
				if sess, err := a.Load(ctx, sid, false); err != nil || len(sess.Messages) != 8 {
					t.Errorf("%s: after the append: %v", sid, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A 429 from JetStream (too many requests in flight) is the backend being
// busy, worth repeating (it was answered as a plain error, a 500 to the
// runtime). Many runtimes appending at once through three replicas, three
// to each session, all get their appends in, each once.
func TestManyRuntimesAppendAtOnce(t *testing.T) {
	err := kvstore.APIError(context.Background(), "append", 429, 10210, "atomic publish too many inflight")
	if !errors.Is(err, session.ErrUnavailable) {
		t.Fatalf("a 429 is %v, not unavailable", err)
	}
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Shards: 2}); err != nil {
		t.Fatal(err)
	}
	var svcs []*sessions.Service
	for range 3 {
		nc2, js2 := natstest.ConnectURL(t, nc.ConnectedUrl())
		s, err := kvstore.NewSessions(ctx, nc2, js2)
		if err != nil {
			t.Fatal(err)
		}
		svcs = append(svcs, sessions.New(s, nil, nil))
	}
	n := 150
	if raceEnabled {
		n = 40 // (the race detector slows every write; the mapping is checked above)
	}
	for i := range n {
		if _, err := svcs[0].Create(ctx, session.Record{SessionID: fmt.Sprintf("busy-%d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range n {
		for k := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := session.Message{ID: fmt.Sprintf("m%d", k), Role: session.RoleUser, Content: session.TextContent(strings.Repeat("word ", 50))}
				if _, err := svcs[(i+k)%3].Append(ctx, fmt.Sprintf("busy-%d", i), []session.Message{m}, session.AppendOptions{}); err != nil {
					failed.Add(1)
					t.Log(err)
				}
			}()
		}
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		t.Fatalf("%d appends failed", f)
	}
	for i := range n {
		if rec, err := svcs[1].Store().Record(ctx, fmt.Sprintf("busy-%d", i)); err != nil || rec.HeadSeq != 3 {
			t.Fatalf("session %d: head %d, %v", i, rec.HeadSeq, err)
		}
	}
}
