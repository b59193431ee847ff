package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// prepCfg is the default configuration without the message-count trigger,
// so that the token limit alone decides.
func prepCfg() pipeline.Config {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	return cfg
}

// turn is one turn of chat: four messages with distinct facts.
func turn(i int) []session.Message {
	return chat(i + 1)[1+4*i:]
}

// grow appends turns, from turn next on, until the session's context
// reaches share of limit; it returns the next turn.
func (e *env) grow(t *testing.T, id string, next, limit int, share float64) int {
	t.Helper()
	for ; e.tokens(t, id) < int(share*float64(limit)); next++ {
		if _, err := e.store.Append(context.Background(), id, turn(next)...); err != nil {
			t.Fatal(err)
		}
	}
	return next
}

func (e *env) tokens(t *testing.T, id string) int {
	t.Helper()
	ctx := e.context(t, id)
	for i := range ctx {
		ctx[i].Tokens = 0
	}
	return e.counter.Context(ctx)
}

func prepare(t *testing.T, e *env, id string) pipeline.Preparation {
	t.Helper()
	p, err := e.svc.Prepare(context.Background(), pipeline.PrepareRequest{SessionID: id, Trigger: pipeline.PrepareAppend})
	if err != nil {
		t.Fatalf("Prepare(%s): %v (%+v)", id, err, p)
	}
	return p
}

// A session prepared at prepare_at is compacted by its over-budget
// request with no model call, and the messages appended since the
// preparation stay raw in the tail.
func TestPreparedAnswersWithoutModel(t *testing.T) {
	const limit = 6000
	e, rec := newRecorderEnv(t, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.5)
	if p := prepare(t, e, "s"); p.Outcome != pipeline.PrepareBelow {
		t.Fatalf("under prepare_at: %+v", p)
	}
	next = e.grow(t, "s", next, limit, 0.72)
	p := prepare(t, e, "s")
	if p.Outcome != pipeline.PrepareDone || p.LLMCalls == 0 {
		t.Fatalf("preparation: %+v", p)
	}
	calls := rec.count.Load()
	before := e.context(t, "s")
	// Prepared, not committed: the context has not changed.
	if again := e.context(t, "s"); len(again) != len(before) || again[1].IsCompaction {
		t.Fatal("a preparation changed the context")
	}
	if p2 := prepare(t, e, "s"); p2.Outcome != pipeline.PrepareUnchanged {
		t.Fatalf("second preparation of the same range: %+v", p2)
	}
	// The session grows past its limit; the messages since the
	// preparation are new.
	rs, _ := e.store.Record(context.Background(), "s")
	preparedHead := rs.HeadSeq
	e.grow(t, "s", next, limit, 1.01)
	if p3 := prepare(t, e, "s"); p3.Outcome != pipeline.PrepareBelow {
		t.Fatalf("over the limit, a preparation is not started: %+v", p3)
	}
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "prepared" || res.LLMCalls != 0 {
		t.Fatalf("result %+v", res)
	}
	if rec.count.Load() != calls {
		t.Fatalf("the request called the model: %d calls, %d before", rec.count.Load(), calls)
	}
	if res.TokensAfter > int(pipeline.DefaultConfig().PrepareAt*limit) || res.TokensAfter >= res.TokensBefore {
		t.Fatalf("tokens %d -> %d", res.TokensBefore, res.TokensAfter)
	}
	after := e.context(t, "s")
	rs, _ = e.store.Record(context.Background(), "s")
	if !after[1].IsCompaction || after[1].ID != res.CompactionMessageID {
		t.Fatalf("context does not start with the prepared compaction: %+v", after[1])
	}
	var seqs []int64
	for _, m := range after[2:] {
		seqs = append(seqs, m.Seq)
	}
	if seqs[len(seqs)-1] != rs.HeadSeq || seqs[0] > preparedHead {
		t.Fatalf("tail %v: want every message from before the preparation's head %d to the head %d", seqs, preparedHead, rs.HeadSeq)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("tail has a gap: %v", seqs)
		}
	}
	// A redelivery answers from the compaction it made.
	again, err := e.svc.Compact(context.Background(), pipeline.Request{ID: res.RequestID, SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || again.Outcome != pipeline.OutcomeCompacted || again.Strategy != "redelivered" {
		t.Fatalf("redelivery: %+v %v", again, err)
	}
	if st := e.svc.PrepareStats(); st.Used != 1 || st.Ready != 1 || st.WastedTokens != 0 {
		t.Fatalf("stats %+v", st)
	}
	if sp, _ := e.store.Prepared(context.Background(), "s"); sp.State != session.PreparedUsed {
		t.Fatalf("stored preparation %s, want used", sp.State)
	}
}

// A preparation made stale by another compaction is never used: the
// request compacts anew, and the preparation's tokens count as wasted,
// once.
func TestStalePreparationNotUsed(t *testing.T) {
	const limit = 6000
	e, _ := newRecorderEnv(t, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	p := prepare(t, e, "s")
	if p.Outcome != pipeline.PrepareDone {
		t.Fatalf("%+v", p)
	}
	// Another writer (a service that does not read preparations)
	// commits a compaction first, at another head: the preparation's
	// base moves.
	next = e.grow(t, "s", next, limit, 0.8)
	other, err := pipeline.New(struct{ pipeline.SessionStore }{e.store}, e.breakers, extractive.New(e.counter), prepCfg())
	if err != nil {
		t.Fatal(err)
	}
	if res, err := other.Compact(context.Background(), pipeline.Request{ID: "manual", SessionID: "s", Trigger: pipeline.TriggerManual}); err != nil || res.Strategy == "prepared" {
		t.Fatalf("%+v %v", res, err)
	}
	e.grow(t, "s", next, limit, 1.01)
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy == "prepared" || res.Strategy == "prepared_topup" || res.LLMCalls == 0 {
		t.Fatalf("result %+v", res)
	}
	st := e.svc.PrepareStats()
	if st.Stale != 1 || st.Used != 0 || st.WastedTokens != int64(p.InputTokens+p.OutputTokens) {
		t.Fatalf("stats %+v, want one stale preparation wasting %d tokens", st, p.InputTokens+p.OutputTokens)
	}
	if sp, _ := e.store.Prepared(context.Background(), "s"); sp.State != session.PreparedStale {
		t.Fatalf("stored preparation %s, want stale", sp.State)
	}
	// Seen stale again, it is not counted again.
	e.grow(t, "s", 1000, limit, 1.01)
	compact(t, e, "s", pipeline.TriggerOverBudget)
	if st2 := e.svc.PrepareStats(); st2.WastedTokens != st.WastedTokens {
		t.Fatalf("wasted counted twice: %+v", st2)
	}
}

// A preparation that fails stores its failure; it does not count
// against the breaker, and the request falls back to the blocking path.
func TestFailedPreparationFallsBack(t *testing.T) {
	const limit = 6000
	e, rec := newRecorderEnv(t, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		return pipeline.SummaryResponse{}, errors.New("503 upstream overloaded"), true
	}
	p, err := e.svc.Prepare(context.Background(), pipeline.PrepareRequest{SessionID: "s", Trigger: pipeline.PrepareAppend})
	if err == nil || p.Outcome != pipeline.PrepareFailed {
		t.Fatalf("%+v %v", p, err)
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Failures != 0 {
		t.Fatalf("a failed preparation counted against the breaker: %+v", b)
	}
	if sp, _ := e.store.Prepared(context.Background(), "s"); sp.State != session.PreparedFailed || sp.Error == "" {
		t.Fatalf("stored %+v", sp)
	}
	rec.hook = nil
	e.grow(t, "s", next, limit, 1.01)
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy == "prepared" || res.LLMCalls == 0 {
		t.Fatalf("result %+v", res)
	}
	if st := e.svc.PrepareStats(); st.Failed != 1 || st.Used != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// When more came after the preparation than the tail can hold, only the
// excess is summarised, on top of the prepared summary (a top-up).
func TestPreparedTopUp(t *testing.T) {
	const limit = 6000
	e, rec := newRecorderEnv(t, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	p := prepare(t, e, "s")
	if p.Outcome != pipeline.PrepareDone {
		t.Fatalf("%+v", p)
	}
	// An overflow long after the limit: far more than the tail holds.
	e.grow(t, "s", next, limit, 1.4)
	calls := rec.count.Load()
	res := compact(t, e, "s", pipeline.TriggerOverflow)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "prepared_topup" || res.LLMCalls == 0 {
		t.Fatalf("result %+v", res)
	}
	// Only the delta went to the model: none of the prepared range.
	for _, r := range rec.requests()[calls:] {
		for _, m := range r.Messages {
			if m.Seq >= p.FromSeq && m.Seq <= p.ToSeq {
				t.Fatalf("top-up sent message %d, which the preparation summarised (%d-%d)", m.Seq, p.FromSeq, p.ToSeq)
			}
		}
	}
	ctx := e.context(t, "s")
	if !ctx[1].IsCompaction || ctx[1].Compaction.FromSeq != p.FromSeq {
		t.Fatalf("compaction covers from %d, want the preparation's %d", ctx[1].Compaction.FromSeq, p.FromSeq)
	}
	if res.TokensAfter > limit {
		t.Fatalf("tokens after %d", res.TokensAfter)
	}
	if st := e.svc.PrepareStats(); st.TopUps != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// Concurrent preparations of one session make one.
func TestOnePreparationInFlight(t *testing.T) {
	const limit = 6000
	e, rec := newRecorderEnv(t, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	e.grow(t, "s", 1, limit, 0.72)
	release := make(chan struct{})
	rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		<-release
		return pipeline.SummaryResponse{}, nil, false
	}
	var wg sync.WaitGroup
	outs := make([]pipeline.Preparation, 4)
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i], _ = e.svc.Prepare(context.Background(), pipeline.PrepareRequest{SessionID: "s", Trigger: pipeline.PrepareNearBudget, RequestID: fmt.Sprint(i)})
		}()
	}
	for rec.count.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	done := 0
	for _, o := range outs {
		switch o.Outcome {
		case pipeline.PrepareDone:
			done++
		case pipeline.PrepareInFlight, pipeline.PrepareUnchanged:
		default:
			t.Fatalf("outcome %+v", o)
		}
	}
	if done != 1 {
		t.Fatalf("%d preparations, want 1: %+v", done, outs)
	}
}

// A preparation ready for longer than prepared_max_age is never applied:
// the request compacts anew (it counts as stale), and a trigger before the
// request prepares the session again rather than keeping it.
func TestPreparationPastItsMaxAgeIsRedone(t *testing.T) {
	const limit = 6000
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	cfg := prepCfg()
	cfg.PreparedMaxAge = pipeline.Duration(10 * time.Minute)
	rec := &recorder{next: extractive.New(counter(t))}
	e := newEnv(t, rec, cfg)
	svc, err := pipeline.New(e.store, e.breakers, rec, cfg, pipeline.WithClock(func() time.Time { return now }))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	if p := prepare(t, e, "s"); p.Outcome != pipeline.PrepareDone {
		t.Fatalf("%+v", p)
	}
	now = now.Add(5 * time.Minute)
	if p := prepare(t, e, "s"); p.Outcome != pipeline.PrepareUnchanged {
		t.Fatalf("within its age, the preparation stands: %+v", p)
	}
	now = now.Add(6 * time.Minute)
	calls := rec.count.Load()
	if p := prepare(t, e, "s"); p.Outcome != pipeline.PrepareDone || rec.count.Load() == calls {
		t.Fatalf("past its age, the session is prepared again: %+v", p)
	}
	// Again past its age when the request comes: not applied.
	now = now.Add(11 * time.Minute)
	e.grow(t, "s", next, limit, 1.01)
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy == "prepared" || res.Strategy == "prepared_topup" || res.LLMCalls == 0 {
		t.Fatalf("a preparation past its age was applied: %+v", res)
	}
	if st := svc.PrepareStats(); st.Stale != 2 || st.Used != 0 {
		t.Fatalf("stats %+v, want both preparations stale (the first replaced, the second too old)", st)
	}
	if sp, _ := e.store.Prepared(context.Background(), "s"); sp.State != session.PreparedStale {
		t.Fatalf("stored preparation %s, want stale", sp.State)
	}
}

// agentStep is one step of an agent run: a thought with a tool call, and
// its result of about 15 tokens a line.
func agentStep(i, lines int) []session.Message {
	id := fmt.Sprintf("call_%d", i)
	out := make([]string, 0, lines)
	for k := range lines {
		out = append(out, fmt.Sprintf("line %d of file src/mod%d.go: x%d := y%d", k, i, k, i))
	}
	thought := fmt.Sprintf("Step %d: I will read src/mod%d.go to find where the timeout of %d ms is set, then decide how to change it for the user. ", i, i, 100*i)
	return []session.Message{
		{Role: session.RoleAssistant, Content: session.TextContent(strings.Repeat(thought, 4)),
			ToolCalls: []session.ToolCall{{ID: id, Type: "function", Function: session.FunctionCall{Name: "read_file", Arguments: fmt.Sprintf(`{"path":"src/mod%d.go"}`, i)}}}},
		{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(strings.Join(out, "\n"))},
	}
}

// A preparation's judgement whether clearing tool results will do agrees
// with the request's at the limit, in two shapes of agent run: where
// clearing will do (results worth clearing), nothing is prepared and the
// request clears; where it will not (results too small to clear), the
// summary is prepared and the request is answered from it; and where
// the history had results worth clearing but the growth has none, so
// clearing cut enough at 72 % of the limit and not at the limit, the
// summary is prepared too (judging clearing by the context at the
// preparation, not at the limit, said no model was needed and the
// request then called one: a long mini-swe-agent run at 32k did so).
// Either way the request calls no model.
func TestPreparationJudgesClearingAtTheLimit(t *testing.T) {
	const limit = 6000
	for _, c := range []struct {
		name         string
		lines, after int // lines of each tool result before and after the preparation
		every        int // before it, only every such step has lines (the others after)
		prepared     bool
	}{{"results worth clearing", 10, 10, 1, false}, {"results too small to clear", 3, 3, 1, true}, {"some results worth clearing, then none", 12, 0, 3, true}} {
		t.Run(c.name, func(t *testing.T) {
			e, rec := newRecorderEnv(t, prepCfg())
			e.importSession(t, "a", limit, []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent.")},
				{Role: session.RoleUser, Content: session.TextContent("Make the request timeout configurable in src/, with a default of 30 s.")}})
			next := 0
			for ; e.tokens(t, "a") < int(0.72*limit); next++ {
				lines := c.lines
				if c.every > 1 && next%c.every != 0 {
					lines = c.after
				}
				if _, err := e.store.Append(context.Background(), "a", agentStep(next, lines)...); err != nil {
					t.Fatal(err)
				}
			}
			p := prepare(t, e, "a")
			if want := map[bool]pipeline.PrepareOutcome{true: pipeline.PrepareDone, false: pipeline.PrepareNoModel}[c.prepared]; p.Outcome != want {
				t.Fatalf("preparation at %d tokens: %+v, want %s", e.tokens(t, "a"), p, want)
			}
			for ; e.tokens(t, "a") <= limit; next++ {
				if _, err := e.store.Append(context.Background(), "a", agentStep(next, c.after)...); err != nil {
					t.Fatal(err)
				}
			}
			calls := rec.count.Load()
			res := compact(t, e, "a", pipeline.TriggerOverBudget)
			want := map[bool]string{true: "prepared", false: "cleared"}[c.prepared]
			if res.Outcome != pipeline.OutcomeCompacted || res.Strategy != want || rec.count.Load() != calls {
				t.Fatalf("the request at the limit: %s %s (%d model calls), want %s with none", res.Outcome, res.Strategy, rec.count.Load()-calls, want)
			}
		})
	}
}

// A preparation keeps raw fewer of the latest turns than
// keep_recent_turns when the growth to come will bring them: committed at
// the limit its raw tail is what it kept plus every turn since, so it
// still holds keep_recent_turns turns, without the turns a compaction made
// at the limit would have summarised.
func TestPreparationLeavesTheGrowthItsTurns(t *testing.T) {
	const limit = 6000
	cfg := prepCfg()
	e, _ := newRecorderEnv(t, cfg)
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	p := prepare(t, e, "s")
	if p.Outcome != pipeline.PrepareDone {
		t.Fatalf("preparation: %+v", p)
	}
	turnsAfter := func(msgs []session.Message, seq int64) int {
		n := 0
		for _, m := range msgs {
			if m.Seq > seq && m.Role == session.RoleUser {
				n++
			}
		}
		return n
	}
	if kept := turnsAfter(e.context(t, "s"), p.ToSeq); kept < 1 || kept >= cfg.KeepRecentTurns {
		t.Fatalf("the preparation kept %d turns raw: want fewer than keep_recent_turns (%d), the growth to come brings the rest", kept, cfg.KeepRecentTurns)
	}
	e.grow(t, "s", next, limit, 1.01)
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Strategy != "prepared" {
		t.Fatalf("result %+v", res)
	}
	if raw := turnsAfter(e.context(t, "s"), p.ToSeq); raw < cfg.KeepRecentTurns {
		t.Fatalf("committed at the limit, %d turns raw, under keep_recent_turns %d", raw, cfg.KeepRecentTurns)
	}
}

// A preparation outlives a compaction that only cleared tool results on
// top of the compaction it was prepared on: the next request is answered
// from it with no model call, the results the clearing cleared after its
// cut still cleared, and the compaction chain goes through the
// clearing. (It was stale at once: an OpenHands run at 8k lost its
// preparation to the clearing of the request at its limit, and its next
// request waited for the model.)
func TestPreparationOutlivesAClearing(t *testing.T) {
	const limit = 10000
	ctx := context.Background()
	e, rec := newRecorderEnv(t, prepCfg())
	e.importSession(t, "a", limit, []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent.")},
		{Role: session.RoleUser, Content: session.TextContent("Make the request timeout configurable in src/, with a default of 30 s.")}})
	next := 0
	step := func(lines int) {
		t.Helper()
		if _, err := e.store.Append(ctx, "a", agentStep(next, lines)...); err != nil {
			t.Fatal(err)
		}
		next++
	}
	for e.tokens(t, "a") < int(0.72*limit) {
		step(3) // too small to clear: a summary is prepared
	}
	p := prepare(t, e, "a")
	if p.Outcome != pipeline.PrepareDone {
		t.Fatalf("preparation: %+v", p)
	}
	// Results worth clearing come, then steps that push them out of the
	// raw tail; another request clears them (a service whose ladder
	// only clears), and the session grows past its limit.
	for range 3 {
		step(25)
	}
	for e.tokens(t, "a") < limit-300 {
		step(0)
	}
	cfg := prepCfg()
	cfg.Reductions, cfg.HeadroomRatio, cfg.KeepToolResults, cfg.MinReduction = []string{pipeline.StepClear}, 0.3, 1, 0.01
	other, err := pipeline.New(e.store, e.breakers, extractive.New(e.counter), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := other.Compact(ctx, pipeline.Request{ID: "clear", SessionID: "a", Trigger: pipeline.TriggerManual})
	if err != nil || cl.Strategy != "cleared" || cl.ToolResultsCleared == 0 {
		t.Fatalf("clearing: %+v %v", cl, err)
	}
	clearing, err := e.store.Record(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// The preparer's next look finds it standing, and stores it on the
	// clearing (a second clearing finds it on its base).
	if again := prepare(t, e, "a"); again.Outcome != pipeline.PrepareUnchanged {
		t.Fatalf("preparation after the clearing: %+v", again)
	}
	if sp, err := e.store.Prepared(ctx, "a"); err != nil || sp.Base != clearing.CompactionID || !sp.Usable(clearing) {
		t.Fatalf("stored preparation on %q (%v), want on the clearing %s", sp.Base, err, clearing.CompactionID)
	}
	for e.tokens(t, "a") <= limit {
		step(0)
	}
	calls := rec.count.Load()
	res := compact(t, e, "a", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "prepared" || rec.count.Load() != calls {
		t.Fatalf("after the clearing: %s %s (%d model calls), want prepared with none", res.Outcome, res.Strategy, rec.count.Load()-calls)
	}
	if st := e.svc.PrepareStats(); st.Stale != 0 || st.Used != 1 {
		t.Fatalf("stats %+v", st)
	}
	now, err := e.store.Record(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	m, err := e.store.Compaction(ctx, "a", now.CompactionID)
	if err != nil {
		t.Fatal(err)
	}
	if m.Compaction.Previous != clearing.CompactionID || m.Compaction.FromSeq != p.FromSeq || m.Compaction.ToSeq != p.ToSeq {
		t.Fatalf("committed %+v on %s, want the preparation's range %d-%d after the clearing", m.Compaction, clearing.CompactionID, p.FromSeq, p.ToSeq)
	}
	// What the clearing cleared past the cut is still cleared.
	c, err := e.store.Compaction(ctx, "a", clearing.CompactionID)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, x := range c.Compaction.Cleared {
		if x.Seq > p.ToSeq {
			want++
		}
	}
	shown := 0
	for _, x := range e.context(t, "a") {
		for _, y := range c.Compaction.Cleared {
			if x.Seq == y.Seq && x.Seq > p.ToSeq && strings.Contains(x.Content.Text, "cleared") {
				shown++
			}
		}
	}
	if want == 0 || shown != want {
		t.Fatalf("%d results the clearing cleared after the cut, %d shown cleared now", want, shown)
	}
}

// hangsUnawaited is a summariser whose first call (a preparation's) hangs
// until a request waits for its preparation (as the router's hedge then
// answers it), or until it is cancelled.
type hangsUnawaited struct {
	next  pipeline.Summarizer
	calls atomic.Int64
}

func (h *hangsUnawaited) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	if h.calls.Add(1) == 1 {
		for !pipeline.Awaited(ctx) {
			select {
			case <-ctx.Done():
				return pipeline.SummaryResponse{}, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return h.next.Summarize(ctx, req)
}

// Issue 42: a request that came while the session's preparation ran
// waited for it, and a preparation's calls are not hedged: a hung one held
// the request for the whole call timeout (make chaos: 61 s). While a
// request waits for it, a preparation's calls say so (Awaited), and the
// router hedges them as the request's own.
func TestRequestWaitingMakesAPreparationUrgent(t *testing.T) {
	const limit = 6000
	sum := &hangsUnawaited{next: extractive.New(counter(t))}
	e := newEnv(t, sum, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	prepared := make(chan pipeline.Preparation, 1)
	go func() {
		p, _ := e.svc.Prepare(context.Background(), pipeline.PrepareRequest{SessionID: "s", Trigger: pipeline.PrepareAppend})
		prepared <- p
	}()
	for sum.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	e.grow(t, "s", next, limit, 1.01)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // never awaited, it fails here
	defer cancel()
	res, err := e.svc.Compact(ctx, pipeline.Request{ID: "over", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("the request beside a preparation: %v %+v", err, res)
	}
	if p := <-prepared; p.Outcome != pipeline.PrepareDone {
		t.Fatalf("the preparation the request waited for: %+v", p)
	}
	if res.Strategy != "prepared" && res.Strategy != "prepared_topup" {
		t.Fatalf("the request did not use the preparation it waited for: %+v", res)
	}
}

// A preparation told the overshoot (the session's biggest append) is
// planned to fit a request that comes that far past the limit: it cuts
// further than one planned at the limit alone, and a session whose big
// append takes it over gets its compaction from it, no model call.
func TestPreparationFitsTheOvershoot(t *testing.T) {
	const limit = 6000
	big := session.Message{Role: session.RoleUser, Content: session.TextContent(strings.Repeat("row 17: status=ok latency=41ms region=eu-west-1 shard=7\n", 60))}
	c, _ := tokens.ForEncoding("o200k_base")
	overshoot := c.Message(&big)
	run := func(overshoot int) (pipeline.Preparation, *pipeline.Result) {
		e, _ := newRecorderEnv(t, prepCfg())
		e.importSession(t, "s", limit, chat(1))
		e.grow(t, "s", 1, limit, 0.72)
		p, err := e.svc.Prepare(context.Background(), pipeline.PrepareRequest{SessionID: "s", Trigger: pipeline.PrepareAppend, Overshoot: overshoot})
		if err != nil || p.Outcome != pipeline.PrepareDone {
			t.Fatalf("preparation: %+v %v", p, err)
		}
		// Small turns up to the limit, then the big observation over it.
		for next := 40; e.tokens(t, "s")+overshoot/4 <= limit; next++ {
			if _, err := e.store.Append(context.Background(), "s", turn(next)...); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.store.Append(context.Background(), "s", big); err != nil {
			t.Fatal(err)
		}
		if n := e.tokens(t, "s"); n <= limit {
			t.Fatalf("the big append left %d tokens, not over %d", n, limit)
		}
		return p, compact(t, e, "s", pipeline.TriggerOverBudget)
	}
	p, res := run(overshoot)
	if res.Strategy != "prepared" || res.LLMCalls != 0 {
		t.Fatalf("with the overshoot: %+v", res)
	}
	if p0, _ := run(0); p.TokensAfter >= p0.TokensAfter {
		t.Fatalf("planned for an overshoot of %d, the preparation leaves %d tokens, no fewer than the %d it leaves at the limit", overshoot, p.TokensAfter, p0.TokensAfter)
	}
}

// An overshoot no cut leaves room for (the session's biggest append, a
// tool output of most of the window, on top of its pinned head) does not
// stop the preparation: it is planned at the limit alone, as the request
// will need it when no such append comes. It was refused as if the
// settings allowed no compaction (configuration_error), and the agent
// sessions of the big-observations replay (every sixth tool output 30 %
// of the window) got none.
func TestPreparationAtTheLimitWhenTheOvershootLeavesNoRoom(t *testing.T) {
	const limit = 6000
	e, _ := newRecorderEnv(t, prepCfg())
	e.importSession(t, "s", limit, chat(1))
	e.grow(t, "s", 1, limit, 0.72)
	p, err := e.svc.Prepare(context.Background(), pipeline.PrepareRequest{SessionID: "s", Trigger: pipeline.PrepareAppend, Overshoot: limit})
	if err != nil || p.Outcome != pipeline.PrepareDone {
		t.Fatalf("preparation with an overshoot of the whole window: %+v %v", p, err)
	}
}

// Issue 45: an append bigger than the preparation foresaw (a large tool
// output just before the request) leaves the prepared context past what
// it was planned for. Within halfway from the target to the limit, where
// a clearing stands too, the request commits the preparation as it is,
// with no model call; past that it is topped up.
func TestPreparationStandsABigAppend(t *testing.T) {
	const limit = 6000
	for _, c := range []struct {
		share float64 // of the limit, the prepared context with the big append
		want  string
	}{{0.76, "prepared"}, {0.86, "prepared_topup"}} {
		t.Run(c.want, func(t *testing.T) {
			e, rec := newRecorderEnv(t, prepCfg())
			e.importSession(t, "s", limit, chat(1))
			e.grow(t, "s", 1, limit, 0.72)
			p := prepare(t, e, "s")
			if p.Outcome != pipeline.PrepareDone || p.TokensAfter == 0 {
				t.Fatalf("%+v", p)
			}
			big := session.Message{Role: session.RoleUser}
			var text strings.Builder
			for i := 0; ; i++ {
				fmt.Fprintf(&text, "Line %d of the report: gate B%d holds flight %d. ", i, i%40, 100+i)
				big.Content = session.TextContent(text.String())
				if p.TokensAfter+e.counter.Context([]session.Message{big}) >= int(c.share*limit) {
					break
				}
			}
			if _, err := e.store.Append(context.Background(), "s", big); err != nil {
				t.Fatal(err)
			}
			if e.tokens(t, "s") <= limit {
				t.Fatalf("the big append leaves %d tokens: not over the limit", e.tokens(t, "s"))
			}
			calls := rec.count.Load()
			res := compact(t, e, "s", pipeline.TriggerOverBudget)
			if res.Outcome != pipeline.OutcomeCompacted || res.Strategy != c.want {
				t.Fatalf("result %+v, want strategy %s", res, c.want)
			}
			if made := rec.count.Load() - calls; (made == 0) != (c.want == "prepared") {
				t.Fatalf("%d model calls for strategy %s", made, res.Strategy)
			}
			if res.TokensAfter > limit*4/5 {
				t.Fatalf("tokens after %d, over halfway from the target to the limit (%d)", res.TokensAfter, limit*4/5)
			}
		})
	}
}

// gatedStore holds a load, once armed, until the session's preparation
// has been asked for.
type gatedStore struct {
	*memstore.Store
	armed  atomic.Bool
	asked  chan struct{}
	once   sync.Once
	waited atomic.Bool // the load gave up waiting
}

func (g *gatedStore) Load(ctx context.Context, id string, history bool) (*session.Session, error) {
	if g.armed.Load() {
		select {
		case <-g.asked:
		case <-time.After(10 * time.Second):
			g.waited.Store(true)
		}
	}
	return g.Store.Load(ctx, id, history)
}

func (g *gatedStore) Prepared(ctx context.Context, id string) (session.PreparedCompaction, error) {
	if g.armed.Load() {
		g.once.Do(func() { close(g.asked) })
	}
	return g.Store.Prepared(ctx, id)
}

// Issue 43: a request reads the session's preparation beside its load,
// not after it (a round trip more on every request that needs a model):
// the load is held here until the preparation has been asked for, and the
// request is still answered from it.
func TestARequestReadsItsPreparationBesideItsLoad(t *testing.T) {
	const limit = 6000
	g := &gatedStore{Store: memstore.New(), asked: make(chan struct{})}
	c := counter(t)
	rec := &recorder{next: extractive.New(c)}
	svc, err := pipeline.New(g, memstore.NewBreakers(), rec, prepCfg())
	if err != nil {
		t.Fatal(err)
	}
	e := &env{store: g.Store, svc: svc, counter: c}
	e.importSession(t, "s", limit, chat(1))
	next := e.grow(t, "s", 1, limit, 0.72)
	if p := prepare(t, e, "s"); p.Outcome != pipeline.PrepareDone {
		t.Fatalf("preparation: %+v", p)
	}
	e.grow(t, "s", next, limit, 1.01)
	g.armed.Store(true)
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if g.waited.Load() {
		t.Fatal("the request asked for the preparation only after its load")
	}
	if res.Strategy != pipeline.StrategyPrepared {
		t.Fatalf("result %+v", res)
	}
}
