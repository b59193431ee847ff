package kvstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/storetest"
	"github.com/compactor/compactor/internal/tokens"
)

// jetStream starts an embedded nats-server for one test and returns a
// connection with the buckets provisioned.
func jetStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	_, nc, js := natstest.Start(t)
	ctx := context.Background()
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Shards: 2}); err != nil {
		t.Fatal(err)
	}
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{}); err != nil { // idempotent, the count kept
		t.Fatalf("second provision: %v", err)
	}
	return nc, js
}

func TestSessionStore(t *testing.T) {
	storetest.RunSessionStore(t, storetest.Features{IDWindow: kvstore.RecentIDs}, func(t *testing.T) storetest.Store {
		nc, js := jetStream(t)
		s, err := kvstore.NewSessions(context.Background(), nc, js)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestBreakers(t *testing.T) {
	storetest.RunBreakers(t, func(t *testing.T) storetest.Breakers {
		nc, js := jetStream(t)
		b, err := kvstore.NewBreakers(context.Background(), nc, js)
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

// A session of 10,000 messages and 3 MB (1,200 under -race): no value near
// max_payload, and the pipeline compacts it on the KV store.
func TestLargeSessionCompacts(t *testing.T) {
	if testing.Short() {
		t.Skip("large session")
	}
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	b, _ := kvstore.NewBreakers(ctx, nc, js)
	counter, _ := tokens.ForEncoding("o200k_base")
	var msgs []session.Message
	bytes := 0
	pairs := 5000
	if raceEnabled {
		pairs = 600
	}
	for i := range pairs {
		u := session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("step %d: check order ORD-%06d; %s", i, i, strings.Repeat("details ", 40)))}
		a := session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("order ORD-%06d is shipped; %s", i, strings.Repeat("notes ", 40)))}
		u.Tokens, a.Tokens = 90, 70 // counted as a runtime would before appending
		msgs = append(msgs, u, a)
		bytes += len(u.Content.Text) + len(a.Content.Text)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "big", Model: "gpt-4o", ContextLimit: 8000}, msgs); err != nil {
		t.Fatal(err)
	}
	svc, err := pipeline.New(s, b, extractive.New(counter), pipeline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Compact(ctx, pipeline.Request{ID: "r", SessionID: "big", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.TokensAfter > 8000 {
		t.Fatalf("%v %+v", err, res)
	}
	t.Logf("%d messages, %d KB: compacted %d -> %d tokens in %d ms, %d chunks", len(msgs), bytes>>10, res.TokensBefore, res.TokensAfter, res.DurationMS, res.Chunks)
	sess, err := s.Load(ctx, "big", false)
	if err != nil || len(sess.Messages) > 100 {
		t.Fatalf("after compaction Load reads %d messages (%v), want the tail only", len(sess.Messages), err)
	}
}

// invoiceSessionEnv is a provisioned server's stores and 120 counted
// messages of a chat about invoices.
func invoiceSessionEnv(t *testing.T) (jetstream.JetStream, *kvstore.Sessions, *kvstore.Breakers, *tokens.Counter, []session.Message) {
	t.Helper()
	nc, js := jetStream(t)
	ctx := context.Background()
	s, _ := kvstore.NewSessions(ctx, nc, js)
	b, _ := kvstore.NewBreakers(ctx, nc, js)
	counter, _ := tokens.ForEncoding("o200k_base")
	var msgs []session.Message
	for i := range 60 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d about invoice INV-%d", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("invoice INV-%d totals $%d", i, 100+i))})
	}
	for i := range msgs {
		counter.Ensure(&msgs[i])
	}
	return js, s, b, counter, msgs
}

// Two replicas racing on one session with two requests over the KV store:
// one compaction, one compacted answer and one already_compacted.
func TestReplicasRaceOnKV(t *testing.T) {
	_, s, b, counter, msgs := invoiceSessionEnv(t)
	ctx := context.Background()
	s.Create(ctx, session.Record{SessionID: "race", Model: "gpt-4o", ContextLimit: 1500}, msgs)
	var arrived sync.WaitGroup
	arrived.Add(2)
	sum := barrier{next: extractive.New(counter), wg: &arrived}
	var wg sync.WaitGroup
	outcomes := make(chan pipeline.Outcome, 2)
	for _, id := range []string{"a", "b"} {
		svc, _ := pipeline.New(s, b, sum, pipeline.DefaultConfig())
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := svc.Compact(ctx, pipeline.Request{ID: id, SessionID: "race", Trigger: pipeline.TriggerOverBudget})
			if err != nil {
				t.Error(err)
			}
			outcomes <- res.Outcome
		}()
	}
	wg.Wait()
	close(outcomes)
	got := map[pipeline.Outcome]int{}
	for o := range outcomes {
		got[o]++
	}
	if got[pipeline.OutcomeCompacted] != 1 || got[pipeline.OutcomeAlreadyCompacted] != 1 {
		t.Fatalf("outcomes %v", got)
	}
	if _, comps, _ := s.History(ctx, "race"); len(comps) != 1 {
		t.Fatalf("%d compactions", len(comps))
	}
}

// barrier holds every summary call until two have arrived.
type barrier struct {
	next pipeline.Summarizer
	wg   *sync.WaitGroup
}

func (b barrier) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	b.wg.Done()
	b.wg.Wait()
	return b.next.Summarize(ctx, r)
}

// A compaction message written by a writer that lost its commit is not
// part of the history; the committed chain is, oldest first, and marks the
// messages it covers.
func TestHistoryIsTheCommittedChain(t *testing.T) {
	js, s, b, counter, msgs := invoiceSessionEnv(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, session.Record{SessionID: "h", Model: "gpt-4o", ContextLimit: 1500}, msgs[:80]); err != nil {
		t.Fatal(err)
	}
	svc, _ := pipeline.New(s, b, extractive.New(counter), pipeline.DefaultConfig())
	first, err := svc.Compact(ctx, pipeline.Request{ID: "1", SessionID: "h", Trigger: pipeline.TriggerOverBudget})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "h", msgs[80:]...); err != nil {
		t.Fatal(err)
	}
	second, err := svc.Compact(ctx, pipeline.Request{ID: "2", SessionID: "h", Trigger: pipeline.TriggerOverflow})
	if err != nil || second.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("%v %+v", err, second)
	}
	// A compaction message of the session whose commit was lost.
	rec, _ := s.Record(ctx, "h")
	_, _, _, data := s.Place("h")
	orphan := nats.NewMsg(data + "c")
	orphan.Header.Set("Compactor-Epoch", rec.Epoch)
	orphan.Data = []byte(`{"id":"orphan","seq":200,"role":"user","content":"lost","is_compaction":true,"compaction":{"summary_text":"lost","from_seq":1,"to_seq":120}}`)
	if _, err := js.PublishMsg(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	all, comps, err := s.History(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 2 || comps[0].ID != first.CompactionMessageID || comps[1].ID != second.CompactionMessageID {
		t.Fatalf("history lists %d compactions", len(comps))
	}
	counts := map[string]int{}
	for _, m := range all {
		counts[m.SummarisedBy]++
	}
	if counts["orphan"] != 0 || counts[first.CompactionMessageID] != first.MessagesSummarised || counts[second.CompactionMessageID] != second.MessagesSummarised {
		t.Fatalf("marks %v; summarised %d then %d", counts, first.MessagesSummarised, second.MessagesSummarised)
	}
}

// A compaction that only cleared tool results, on the KV store: it moves
// no tail and summarises nothing, the context shows the placeholders with
// their stored counts, the history marks nothing summarised by it, the
// originals are read back, two replicas racing on it make one, and a
// summary after it keeps the cleared messages of its tail cleared.
func TestClearedCompactionOnKV(t *testing.T) {
	_, s, b, counter, _ := invoiceSessionEnv(t)
	ctx := context.Background()
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent.")},
		{Role: session.RoleUser, Content: session.TextContent("Fix the failing build.")}}
	for i := range 30 {
		id := fmt.Sprintf("c%d", i)
		msgs = append(msgs, session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function",
			Function: session.FunctionCall{Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"make step%d"}`, i)}}}},
			session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(strings.Repeat(fmt.Sprintf("compiling unit %d ok\n", i), 60))})
	}
	for i := range msgs {
		counter.Ensure(&msgs[i])
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "cl", Model: "gpt-4o", ContextLimit: 8000}, msgs); err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	var results [2]*pipeline.Result
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			svc, _ := pipeline.New(s, b, extractive.New(counter), cfg)
			results[i], _ = svc.Compact(ctx, pipeline.Request{ID: fmt.Sprint("r", i), SessionID: "cl", Trigger: pipeline.TriggerOverBudget})
		})
	}
	wg.Wait()
	compacted, want := 0, 0
	for _, r := range results {
		if r.Outcome == pipeline.OutcomeCompacted {
			compacted, want = compacted+1, r.ToolResultsCleared
			if r.Strategy != "cleared" || r.LLMCalls != 0 || r.ToolResultsCleared == 0 {
				t.Fatalf("result %+v", r)
			}
		}
	}
	sess, err := s.Load(ctx, "cl", false)
	if err != nil {
		t.Fatal(err)
	}
	if compacted != 1 || sess.Record.Compactions != 1 || sess.Record.TailStartSeq != 2 {
		t.Fatalf("%d compacted, record %+v", compacted, sess.Record)
	}
	view := pipeline.ContextOf(sess)
	if len(view) != len(msgs) {
		t.Fatalf("the context has %d messages, want all %d", len(view), len(msgs))
	}
	cleared := 0
	for _, m := range view {
		if strings.HasPrefix(m.Content.Text, pipeline.ClearedPrefix) {
			cleared++
			if n := counter.Message(&m); m.Tokens != n {
				t.Fatalf("placeholder of seq %d counted %d, is %d", m.Seq, m.Tokens, n)
			}
			orig, err := s.Message(ctx, "cl", m.Seq)
			if err != nil || !strings.Contains(orig.Content.Text, "compiling unit") {
				t.Fatalf("original of seq %d: %v", m.Seq, err)
			}
		}
	}
	if cleared == 0 || cleared != want {
		t.Fatalf("%d placeholders", cleared)
	}
	all, comps, err := s.History(ctx, "cl")
	if err != nil || len(comps) != 1 || comps[0].Compaction.Step != pipeline.StepClear {
		t.Fatalf("history: %v, %d compactions", err, len(comps))
	}
	for _, m := range all {
		if m.SummarisedBy != "" {
			t.Fatalf("seq %d marked summarised by a clearing", m.Seq)
		}
	}
	// Down the ladder: a smaller window needs a summary on top.
	svc, _ := pipeline.New(s, b, extractive.New(counter), cfg)
	res, err := svc.Compact(ctx, pipeline.Request{ID: "small", SessionID: "cl", Trigger: pipeline.TriggerOverBudget, ContextLimit: 3000})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.Strategy == "cleared" || res.TokensAfter > 3000 {
		t.Fatalf("summary after clearing: %+v %v", res, err)
	}
	sess, _ = s.Load(ctx, "cl", false)
	for _, c := range sess.Summary.Compaction.Cleared {
		if c.Seq < sess.Record.TailStartSeq {
			t.Fatalf("cleared seq %d is summarised (tail starts at %d) and still listed", c.Seq, sess.Record.TailStartSeq)
		}
	}
	if _, comps, _ := s.History(ctx, "cl"); len(comps) != 2 {
		t.Fatalf("%d compactions", len(comps))
	}
}

// Issue 42: uploads never named could fill the store. Their parts expire
// an hour after they are stored (the data streams take per-message TTLs,
// and a store provisioned before is updated to).
func TestUploadPartsExpire(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	s, err := kvstore.NewSessions(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, session.Record{SessionID: "up", Model: "gpt-4o"}, []session.Message{{Role: session.RoleUser, Content: session.TextContent("hi")}}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutUploadPart(ctx, "up", "upload-1", 0, 2, []byte("half")); err != nil {
		t.Fatal(err)
	}
	shard := kvstore.ShardOf(kvstore.DefaultTenant, "up", s.Shards())
	st, err := js.Stream(ctx, kvstore.DataStream(shard))
	if err != nil {
		t.Fatal(err)
	}
	if !st.CachedInfo().Config.AllowMsgTTL {
		t.Fatal("the data stream takes no per-message TTL")
	}
	m, err := st.GetLastMsgForSubject(ctx, kvstore.DataSubjectPrefix+fmt.Sprint(shard)+"._.up.>")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(jetstream.MsgTTLHeader); got != kvstore.UploadTTL.String() {
		t.Fatalf("upload part's TTL %q, want %s", got, kvstore.UploadTTL)
	}
}

// A commit tries the record it was planned on from this replica's cache:
// when another replica committed meanwhile, the compare-and-set fails, the
// record is read again and the commit refused; the one committed stands
// and the history is its chain. Planned on what is stored, it commits
// from the cache.
func TestACommitOnAStaleCachedRecordIsRefused(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	a, _ := kvstore.NewSessions(ctx, nc, js)
	b, _ := kvstore.NewSessions(ctx, nc, js) // another replica
	msgs := make([]session.Message, 0, 12)
	for i := range 6 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d", i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("answer %d", i))})
	}
	if _, err := a.Create(ctx, session.Record{SessionID: "r"}, msgs); err != nil {
		t.Fatal(err)
	}
	commit := func(s *kvstore.Sessions, upTo int, id string) error {
		sess, err := s.Load(ctx, "r", true)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Commit(ctx, commitOf(sess, upTo, id))
		return err
	}
	// a plans (its cache now holds the record); b commits first.
	sess, _ := a.Load(ctx, "r", true)
	if err := commit(b, 6, "by-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, commitOf(sess, 4, "by-a")); !errors.Is(err, session.ErrConflict) {
		t.Fatalf("commit on the stale record: %v, want ErrConflict", err)
	}
	if _, comps, err := a.History(ctx, "r"); err != nil || len(comps) != 1 || comps[0].ID != "by-b" {
		t.Fatalf("history: %v %+v", err, comps)
	}
	// Planned again on what is stored, a commits.
	if err := commit(a, 8, "by-a-2"); err != nil {
		t.Fatal(err)
	}
	if _, comps, err := b.History(ctx, "r"); err != nil || len(comps) != 2 || comps[1].ID != "by-a-2" {
		t.Fatalf("history: %v %+v", err, comps)
	}
}

// commitOf is a commit of sess (loaded with its history) summarising
// messages 2..upTo-1, planned on its record.
func commitOf(sess *session.Session, upTo int, id string) session.Commit {
	prev := sess.Record.CompactionID
	var seqs []int64
	var tail session.Message
	for _, m := range sess.Messages {
		if m.Seq >= 2 && m.Seq < int64(upTo) {
			seqs = append(seqs, m.Seq)
		}
		if m.Seq == int64(upTo) {
			tail = m
		}
	}
	base := sess.Record
	return session.Commit{SessionID: "r", PrevCompactionID: prev, Pinned: []int64{1}, Summarised: seqs, TailStartID: tail.ID, TailStartSeq: tail.Seq,
		Now: time.Now().UTC(), Base: &base,
		Compaction: session.Message{ID: id, Role: session.RoleUser, Content: session.TextContent("summary"), IsCompaction: true,
			Compaction: &session.CompactionMeta{SummaryText: "summary", FromSeq: 2, ToSeq: tail.Seq - 1, TailStartSeq: tail.Seq, Previous: prev}}}
}

// Many appends to one session at once, through two replicas (two stores on
// their own connections): every one is applied, once, and none is refused
// for losing the race too often. Before, each lost compare-and-set was
// retried at once, up to 50 times: make chaos's flood (quotas lifted, one
// session written by dozens of requests through two replicas) had appends
// answered 503 "conflict after 50 tries".
func TestContendedAppends(t *testing.T) {
	nc, js := jetStream(t)
	ctx := context.Background()
	a, err := kvstore.NewSessions(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	nc2, err := nats.Connect(nc.ConnectedUrl())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	js2, _ := jetstream.New(nc2)
	b, err := kvstore.NewSessions(ctx, nc2, js2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, session.Record{SessionID: "busy", Model: "gpt-4o", ContextLimit: 100000}, nil); err != nil {
		t.Fatal(err)
	}
	const perReplica = 200
	var wg sync.WaitGroup
	errs := make(chan error, 2*perReplica)
	for r, s := range []*kvstore.Sessions{a, b} {
		for i := range perReplica {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m := session.Message{ID: fmt.Sprintf("m-%d-%d", r, i), Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("turn %d of replica %d", i, r))}
				if _, err := s.Append(ctx, "busy", m); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rec, err := a.Record(ctx, "busy")
	if err != nil || rec.HeadSeq != 2*perReplica {
		t.Fatalf("head %d (%v), want %d", rec.HeadSeq, err, 2*perReplica)
	}
	sess, err := a.Load(ctx, "busy", false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range sess.Messages {
		if seen[m.ID] {
			t.Fatalf("%s stored twice", m.ID)
		}
		seen[m.ID] = true
	}
	if len(seen) != 2*perReplica {
		t.Fatalf("%d messages stored, want %d", len(seen), 2*perReplica)
	}
	// Each replica's append says the session's bytes with the other's
	// appends in them (what the preparer estimates their gap from).
	for r, s := range []*kvstore.Sessions{a, b, a} {
		m := session.Message{ID: fmt.Sprintf("last-%d", r), Role: session.RoleUser, Content: session.TextContent("one more")}
		ap, err := s.Append(ctx, "busy", m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.AppendWith(ctx, "busy", ap, session.AppendOptions{}) // applied already: the same bytes
		if err != nil {
			t.Fatal(err)
		}
		rec, err := b.Record(ctx, "busy")
		if err != nil {
			t.Fatal(err)
		}
		sess, _ := b.Load(ctx, "busy", false)
		var want int64
		for i := range sess.Messages {
			want += int64(session.TextBytes(&sess.Messages[i]))
		}
		if got.Bytes != want || rec.Bytes != want {
			t.Fatalf("replica %d: the append says %d bytes, the record %d, the messages %d", r, got.Bytes, rec.Bytes, want)
		}
	}
}

// A load says whether a compaction message was written after the one in
// force (Settled), so that a request asks for its own only when one was:
// none before the first compaction, none after it commits, and one when a
// writer that lost its commit left its message.
func TestLoadSaysWhetherACompactionIsUnsettled(t *testing.T) {
	js, s, b, counter, msgs := invoiceSessionEnv(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, session.Record{SessionID: "u", Model: "gpt-4o", ContextLimit: 1500}, msgs); err != nil {
		t.Fatal(err)
	}
	settled := func(when string, want bool) {
		t.Helper()
		sess, err := s.Load(ctx, "u", false)
		if err != nil || sess.Settled != want {
			t.Fatalf("%s: settled %v (%v), want %v", when, sess != nil && sess.Settled, err, want)
		}
	}
	settled("before any compaction", true)
	svc, _ := pipeline.New(s, b, extractive.New(counter), pipeline.DefaultConfig())
	if _, err := svc.Compact(ctx, pipeline.Request{ID: "1", SessionID: "u", Trigger: pipeline.TriggerOverBudget}); err != nil {
		t.Fatal(err)
	}
	settled("after a commit", true)
	rec, _ := s.Record(ctx, "u")
	_, _, _, data := s.Place("u")
	orphan := nats.NewMsg(data + "c")
	orphan.Header.Set("Compactor-Epoch", rec.Epoch)
	orphan.Data = []byte(`{"id":"orphan","seq":200,"role":"user","content":"lost","is_compaction":true,"compaction":{"summary_text":"lost","from_seq":1,"to_seq":120}}`)
	if _, err := js.PublishMsg(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	settled("with a message whose commit was lost", false)
}
