package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
)

// recorder wraps a summariser and records every request; hook, when set,
// runs before each call and may replace its answer.
type recorder struct {
	mu    sync.Mutex
	next  pipeline.Summarizer
	reqs  []pipeline.SummaryRequest
	hook  func(n int, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool)
	count atomic.Int64
}

func (r *recorder) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	n := int(r.count.Add(1))
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		if resp, err, done := hook(n, req); done {
			return resp, err
		}
	}
	return r.next.Summarize(ctx, req)
}

func (r *recorder) requests() []pipeline.SummaryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pipeline.SummaryRequest(nil), r.reqs...)
}

func newRecorderEnv(t *testing.T, cfg pipeline.Config) (*env, *recorder) {
	t.Helper()
	rec := &recorder{next: extractive.New(counter(t))}
	return newEnv(t, rec, cfg), rec
}

// chat builds a synthetic agent session: a system prompt, then turns of a
// user request, an assistant tool call, its result and an answer, each
// carrying distinct facts.
func chat(turns int) []session.Message {
	out := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a travel agent. Follow the airline policy.")}}
	for i := range turns {
		id := fmt.Sprintf("call_%d", i)
		out = append(out,
			session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Turn %d: please check reservation RES%04d for passenger Ada Lovelace, flight HAT%03d on 2024-05-%02d.", i, i, i, i%28+1))},
			session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function",
				Function: session.FunctionCall{Name: "get_reservation_details", Arguments: fmt.Sprintf(`{"reservation_id":"RES%04d"}`, i)}}}},
			session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(fmt.Sprintf(`{"reservation_id":"RES%04d","cabin":"economy","price":%d,"status":"confirmed"}`, i, 100+i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Reservation RES%04d is confirmed in economy; it cost $%d. I decided to keep the booking unchanged.", i, 100+i))},
		)
	}
	return out
}

var reqSeq int

func compact(t testing.TB, e *env, id string, trig pipeline.Trigger) *pipeline.Result {
	t.Helper()
	reqSeq++ // each call is a new request, as a runtime's would be
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprintf("req-%s-%d", id, reqSeq), SessionID: id, Trigger: trig})
	if err != nil {
		t.Fatalf("Compact(%s): %v", id, err)
	}
	return res
}

func TestCompactOutcomes(t *testing.T) {
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	e.importSession(t, "empty", 4000, nil)
	e.importSession(t, "small", 4000, chat(2))
	e.importSession(t, "big", 3000, chat(30))

	if got := compact(t, e, "empty", pipeline.TriggerOverflow).Outcome; got != pipeline.OutcomeNothingToCompact {
		t.Errorf("empty session: %s, want nothing_to_compact", got)
	}
	if got := compact(t, e, "small", pipeline.TriggerOverBudget).Outcome; got != pipeline.OutcomeNoop {
		t.Errorf("small session: %s, want noop", got)
	}
	if n := len(rec.requests()); n != 0 {
		t.Fatalf("%d model calls for sessions that need none", n)
	}
	res := compact(t, e, "big", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.TokensAfter >= res.TokensBefore || res.TokensAfter > 3000 {
		t.Fatalf("big session: %+v", res)
	}
	if res.LLMCalls != 1 || res.MessagesSummarised == 0 || res.CompactionMessageID == "" || res.IdempotencyKey == "" {
		t.Fatalf("result fields missing: %+v", res)
	}
	// The system prompt stays cached; the summary and the tail are
	// written anew.
	if res.PrefixKeptTokens == 0 || res.CacheWriteTokens != res.TokensAfter-res.PrefixKeptTokens || res.CacheWriteTokens <= res.SummaryTokens {
		t.Fatalf("prefix kept %d, cache writes %d of %d tokens after (summary %d)", res.PrefixKeptTokens, res.CacheWriteTokens, res.TokensAfter, res.SummaryTokens)
	}
	ctx := e.context(t, "big")
	if ctx[0].Role != session.RoleSystem || !ctx[1].IsCompaction || ctx[2].Role != session.RoleUser {
		t.Fatalf("context is not pinned + summary + raw tail: %v %v %v", ctx[0].Role, ctx[1].IsCompaction, ctx[2].Role)
	}
	if err := summary.Validate(ctx[1].Compaction.SummaryText); err != nil {
		t.Fatalf("stored summary invalid: %v", err)
	}

	// The same request again: the context fits now.
	calls := len(rec.requests())
	if got := compact(t, e, "big", pipeline.TriggerOverBudget); got.Outcome != pipeline.OutcomeNoop || got.CacheWriteTokens != 0 {
		t.Errorf("repeat over_budget: %s writing %d tokens anew, want noop writing none", got.Outcome, got.CacheWriteTokens)
	}
	// The model insists: nothing new since the compaction, no model call.
	again := compact(t, e, "big", pipeline.TriggerOverflow)
	if again.Outcome != pipeline.OutcomeAlreadyCompacted || again.Summary == "" || again.CompactionMessageID != res.CompactionMessageID {
		t.Errorf("repeat overflow: %+v, want already_compacted with the existing summary", again)
	}
	if len(rec.requests()) != calls {
		t.Errorf("a repeat request called the model")
	}
	_, comps, _ := e.store.History(context.Background(), "big")
	if len(comps) != 1 {
		t.Fatalf("%d compactions stored, want 1", len(comps))
	}
}

func TestCompactUnknownSessionAndBadRequest(t *testing.T) {
	e, _ := newRecorderEnv(t, pipeline.DefaultConfig())
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "r", SessionID: "nope", Trigger: pipeline.TriggerOverBudget})
	if !errors.Is(err, pipeline.ErrSessionNotFound) || !res.Failed || res.Reason != pipeline.ReasonSessionNotFound || res.RequestID != "r" {
		t.Fatalf("unknown session: %v %+v", err, res)
	}
	res, err = e.svc.Compact(context.Background(), pipeline.Request{ID: "r2", Trigger: pipeline.TriggerOverBudget})
	if !errors.Is(err, pipeline.ErrInvalidRequest) || res.Reason != pipeline.ReasonInvalidRequest {
		t.Fatalf("missing session id: %v %+v", err, res)
	}
	if b, _ := e.breakers.Breaker(context.Background(), "nope"); b.Failures != 0 {
		t.Fatal("a refused request counted as a breaker failure")
	}
}

// Two replicas (two Services, one store) race on one session: one
// compaction message. Two requests answer compacted and already_compacted;
// two deliveries of one request both answer compacted (the request did
// compact), so whichever result is published first is right.
func TestCompactRaceOneCompaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  [2]string
		want map[pipeline.Outcome]int
	}{
		// Two requests: the loser finds the winner's compaction.
		{"two requests", [2]string{"a", "b"}, map[pipeline.Outcome]int{pipeline.OutcomeCompacted: 1, pipeline.OutcomeAlreadyCompacted: 1}},
		// Two deliveries of one request: it compacted, whichever answers.
		{"one request twice", [2]string{"same", "same"}, map[pipeline.Outcome]int{pipeline.OutcomeCompacted: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := counter(t)
			e, _ := newRecorderEnv(t, pipeline.DefaultConfig())
			e.importSession(t, "s", 3000, chat(30))
			var arrived sync.WaitGroup
			arrived.Add(2)
			barrier := &recorder{next: extractive.New(c), hook: func(n int, _ pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
				arrived.Done()
				arrived.Wait() // both replicas hold a summary before either commits
				return pipeline.SummaryResponse{}, nil, false
			}}
			var results [2]*pipeline.Result
			var wg sync.WaitGroup
			for i := range 2 {
				svc, err := pipeline.New(e.store, e.breakers, barrier, pipeline.DefaultConfig())
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := svc.Compact(context.Background(), pipeline.Request{ID: tc.ids[i], SessionID: "s", Trigger: pipeline.TriggerOverBudget})
					if err != nil {
						t.Error(err)
					}
					results[i] = res
				}()
			}
			wg.Wait()
			outcomes := map[pipeline.Outcome]int{}
			for _, r := range results {
				outcomes[r.Outcome]++
			}
			if !maps.Equal(outcomes, tc.want) {
				t.Fatalf("outcomes %v, want %v", outcomes, tc.want)
			}
			if results[0].CompactionMessageID != results[1].CompactionMessageID {
				t.Fatal("the racers answered with different compactions")
			}
			_, comps, _ := e.store.History(context.Background(), "s")
			if len(comps) != 1 {
				t.Fatalf("%d compactions, want 1", len(comps))
			}
		})
	}
}

// A message the runtime appends while the summary is being written survives
// the commit and is in the raw tail.
func TestAppendDuringCompactionNotLost(t *testing.T) {
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	e.importSession(t, "s", 3000, chat(30))
	rec.hook = func(n int, _ pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		if n == 1 {
			if _, err := e.store.Append(context.Background(), "s", session.Message{Role: session.RoleUser, Content: session.TextContent("late message 4242")}); err != nil {
				t.Error(err)
			}
		}
		return pipeline.SummaryResponse{}, nil, false
	}
	if res := compact(t, e, "s", pipeline.TriggerOverBudget); res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("outcome %s", res.Outcome)
	}
	ctx := e.context(t, "s")
	if last := ctx[len(ctx)-1]; last.Content.Text != "late message 4242" {
		t.Fatalf("appended message lost; context ends with %q", last.Content.Text)
	}
	rec2, _ := e.store.Record(context.Background(), "s")
	if rec2.HeadSeq != int64(len(chat(30))+1) {
		t.Fatalf("head seq %d", rec2.HeadSeq)
	}
}

// Incremental compaction sends the model only the messages after the
// previous compaction, and the summary keeps the old facts.
func TestIncrementalOnlyNewMessages(t *testing.T) {
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	msgs := chat(60)
	e.importSession(t, "s", 3000, msgs[:121])
	first := compact(t, e, "s", pipeline.TriggerOverBudget)
	if first.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("first: %+v", first)
	}
	rec1, _ := e.store.Record(context.Background(), "s")
	if _, err := e.store.Append(context.Background(), "s", msgs[121:]...); err != nil {
		t.Fatal(err)
	}
	before := len(rec.requests())
	second := compact(t, e, "s", pipeline.TriggerOverBudget)
	if second.Outcome != pipeline.OutcomeCompacted || !second.Incremental || second.Strategy != "incremental" {
		t.Fatalf("second: %+v", second)
	}
	for _, req := range rec.requests()[before:] {
		if req.Task != pipeline.TaskSummarise {
			continue
		}
		for _, m := range req.Messages {
			if m.IsCompaction {
				continue // the summary in force, leading a call that updates it
			}
			if m.Seq < rec1.TailStartSeq {
				t.Fatalf("incremental call resent message seq %d (tail started at %d)", m.Seq, rec1.TailStartSeq)
			}
		}
	}
	ctx := e.context(t, "s")
	if !strings.Contains(ctx[1].Compaction.SummaryText, "Turn 0") && !strings.Contains(ctx[1].Compaction.SummaryText, "RES0000") {
		t.Errorf("the incremental summary lost the oldest facts:\n%s", ctx[1].Compaction.SummaryText)
	}
	if ctx[1].Compaction.Previous != first.CompactionMessageID {
		t.Error("compaction does not chain to the previous one")
	}
}

// An incremental compaction whose budget shrank under the summary in
// force (at a small window, a long pinned head and a longer raw tail leave
// less than the last compaction had) still writes a summary: the delta
// and the condensed summary get what a summary needs, and the session
// does not fail on every request from then on.
func TestIncrementalUnderASmallerBudget(t *testing.T) {
	ctx := context.Background()
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	msgs := chat(60)
	e.importSession(t, "s", 3000, msgs[:121])
	first := compact(t, e, "s", pipeline.TriggerOverBudget)
	if first.Outcome != pipeline.OutcomeCompacted || first.SummaryTokens < 300 {
		t.Fatalf("first: %s, a %d-token summary (want one over 300)", first.Outcome, first.SummaryTokens)
	}
	if _, err := e.store.Append(ctx, "s", msgs[121:]...); err != nil {
		t.Fatal(err)
	}
	small := pipeline.DefaultConfig()
	small.MaxSummaryTokens = 150
	svc, err := pipeline.New(e.store, e.breakers, rec, small)
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Compact(ctx, pipeline.Request{ID: "small", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || !res.Incremental {
		t.Fatalf("under a %d-token budget after a %d-token summary: %+v %v", small.MaxSummaryTokens, first.SummaryTokens, res, err)
	}
	if bound := small.MaxSummaryTokens; res.SummaryTokens > bound || res.SummaryTokens >= first.SummaryTokens {
		t.Fatalf("a %d-token summary after a %d-token one, under a bound of %d", res.SummaryTokens, first.SummaryTokens, bound)
	}
}

func TestFromScratchResendsHistory(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.EnableIncremental = false
	e, rec := newRecorderEnv(t, cfg)
	msgs := chat(60)
	e.importSession(t, "s", 3000, msgs[:121])
	compact(t, e, "s", pipeline.TriggerOverBudget)
	e.store.Append(context.Background(), "s", msgs[121:]...)
	before := len(rec.requests())
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Incremental {
		t.Fatal("incremental with enable_incremental off")
	}
	sawFirst := false
	for _, req := range rec.requests()[before:] {
		for _, m := range req.Messages {
			sawFirst = sawFirst || m.Seq == 2
		}
	}
	if !sawFirst {
		t.Fatal("from-scratch compaction did not resummarise the history")
	}
}

func TestBreakerOpensAndResets(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.BreakerCooldown = 0 // the design note's breaker: every failure counts, only a reset closes it
	e, rec := newRecorderEnv(t, cfg)
	e.importSession(t, "s", 3000, chat(30))
	failing := true
	rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		if failing {
			return pipeline.SummaryResponse{}, errors.New("upstream 503"), true
		}
		return pipeline.SummaryResponse{}, nil, false
	}
	opened := 0
	for i := 1; i <= cfg.MaxFailures; i++ {
		res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprint(i), SessionID: "s", Trigger: pipeline.TriggerOverBudget})
		if !errors.Is(err, pipeline.ErrSummaryFailed) || res.Reason != pipeline.ReasonSummaryFailed || res.Failures != i {
			t.Fatalf("attempt %d: %v %+v", i, err, res)
		}
		if res.CircuitOpened {
			opened++
			if i != cfg.MaxFailures || res.Breaker == nil || res.Breaker.OpenedAt == nil {
				t.Fatalf("breaker opened at attempt %d: %+v", i, res.Breaker)
			}
		}
	}
	if opened != 1 {
		t.Fatalf("breaker opened %d times, want 1", opened)
	}
	calls := rec.count.Load()
	failing = false
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "x", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if !errors.Is(err, pipeline.ErrCircuitOpen) || res.Reason != pipeline.ReasonCircuitOpen || res.Retryable {
		t.Fatalf("open breaker: %v %+v", err, res)
	}
	if rec.count.Load() != calls {
		t.Fatal("an open breaker still called the summariser")
	}
	prev, err := e.breakers.Reset(context.Background(), "s", time.Now()) // an operator's reset (sessions.Service.ResetBreaker)
	if err != nil || !prev.Open() || prev.Failures != cfg.MaxFailures {
		t.Fatalf("Reset = %+v, %v", prev, err)
	}
	if res := compact(t, e, "s", pipeline.TriggerOverBudget); res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("after reset: %+v", res)
	}
}

func TestTransientFailureThenSuccessResetsCount(t *testing.T) {
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	e.importSession(t, "s", 3000, chat(30))
	rec.hook = func(n int, _ pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		if n == 1 {
			return pipeline.SummaryResponse{}, errors.New("timeout"), true
		}
		return pipeline.SummaryResponse{}, nil, false
	}
	if _, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); err == nil {
		t.Fatal("first attempt should fail")
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Failures != 1 {
		t.Fatalf("failures %d, want 1", b.Failures)
	}
	compact(t, e, "s", pipeline.TriggerOverBudget)
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Failures != 0 {
		t.Fatalf("a success left %d failures", b.Failures)
	}
}

// An answer that is not a summary gets one reminder; an error text or a
// refusal is never stored.
func TestSummaryValidation(t *testing.T) {
	t.Run("reminder then valid", func(t *testing.T) {
		e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
		e.importSession(t, "s", 3000, chat(30))
		rec.hook = func(n int, _ pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
			if n == 1 {
				return pipeline.SummaryResponse{Text: "Here is a summary: they talked about flights."}, nil, true
			}
			return pipeline.SummaryResponse{}, nil, false
		}
		res := compact(t, e, "s", pipeline.TriggerOverBudget)
		reqs := rec.requests()
		if res.LLMCalls != 2 || len(reqs) != 2 || !strings.Contains(reqs[1].Prompt, "could not be used") {
			t.Fatalf("want one reminder retry: calls %d", res.LLMCalls)
		}
	})
	t.Run("empty answer never stored", func(t *testing.T) {
		e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
		e.importSession(t, "s", 3000, chat(30))
		rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
			return pipeline.SummaryResponse{Text: "  "}, nil, true
		}
		if _, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); !errors.Is(err, pipeline.ErrSummaryFailed) {
			t.Fatalf("empty answer: %v", err)
		}
		if _, comps, _ := e.store.History(context.Background(), "s"); len(comps) != 0 {
			t.Fatal("an empty answer was stored")
		}
	})
	t.Run("refusal never stored", func(t *testing.T) {
		e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
		e.importSession(t, "s", 3000, chat(30))
		rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
			return pipeline.SummaryResponse{Text: "I'm sorry, but I can't help with that."}, nil, true
		}
		res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
		if !errors.Is(err, pipeline.ErrSummaryFailed) || res.LLMCalls != 2 {
			t.Fatalf("%v %+v", err, res)
		}
		if _, comps, _ := e.store.History(context.Background(), "s"); len(comps) != 0 {
			t.Fatal("a refusal was stored as a summary")
		}
	})
}

// A summary model with a small input limit: the input is chunked at message
// boundaries, every call fits, and the merged summary is within budget.
func TestChunkedSummarisation(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens = 300
	cfg.SummaryContextLimit = 1800
	e, rec := newRecorderEnv(t, cfg)
	e.importSession(t, "s", 6000, chat(120))
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Chunks < 3 || res.Strategy != "chunked" {
		t.Fatalf("want chunked summarisation, got %+v", res)
	}
	merges := 0
	for _, req := range rec.requests() {
		n := e.counter.Count(req.System) + e.counter.Count(req.Prompt) + req.MaxTokens
		if n > cfg.SummaryContextLimit {
			t.Fatalf("a %s call needs %d tokens, over the summary limit %d", req.Task, n, cfg.SummaryContextLimit)
		}
		if req.Task == pipeline.TaskMerge {
			merges++
		}
	}
	if merges == 0 {
		t.Fatal("chunk summaries were never merged")
	}
	if bound := cfg.MaxSummaryTokens; res.SummaryTokens > bound {
		t.Fatalf("summary %d tokens, over %d (max_summary_tokens and the ledger's share of the window)", res.SummaryTokens, bound)
	}
}

// A summary model that answers "context length exceeded" above a size makes
// the pipeline chunk smaller, never resend the same input.
func TestContextLengthErrorRechunks(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxSummaryTokens = 300
	e, rec := newRecorderEnv(t, cfg)
	e.importSession(t, "s", 6000, chat(60))
	const serverLimit = 2500
	var rejected, accepted atomic.Int64
	rec.hook = func(_ int, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		if e.counter.Count(req.System)+e.counter.Count(req.Prompt) > serverLimit {
			rejected.Add(1)
			return pipeline.SummaryResponse{}, &pipeline.ContextLengthError{Limit: serverLimit, Message: "maximum context length is 2500 tokens"}, true
		}
		accepted.Add(1)
		return pipeline.SummaryResponse{}, nil, false
	}
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if rejected.Load() == 0 || accepted.Load() < 2 || res.Chunks < 2 {
		t.Fatalf("rejected %d accepted %d chunks %d", rejected.Load(), accepted.Load(), res.Chunks)
	}
	seen := map[string]bool{}
	for _, req := range rec.requests() {
		if seen[req.Prompt] {
			t.Fatal("the same input was sent twice")
		}
		seen[req.Prompt] = true
	}
}

// crashingEnv is a session "s" whose store loses the first commit after
// writing its compaction message (as a crash between the two writes).
func crashingEnv(t *testing.T) (*env, *recorder, *pipeline.Service) {
	t.Helper()
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	e.importSession(t, "s", 3000, chat(30))
	svc, err := pipeline.New(&crashStore{Store: e.store}, e.breakers, rec, pipeline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return e, rec, svc
}

// A crash between writing the compaction message and moving the record:
// the retried request finds the message under its key and commits it,
// without a model call.
func TestResumeInterruptedCommit(t *testing.T) {
	e, rec, svc := crashingEnv(t)
	res, err := svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if !errors.Is(err, pipeline.ErrPersistFailed) || !res.Retryable {
		t.Fatalf("crashed commit: %v %+v", err, res)
	}
	calls := rec.count.Load()
	res, err = svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "resumed" {
		t.Fatalf("retry: %v %+v", err, res)
	}
	if rec.count.Load() != calls {
		t.Fatal("resuming called the model again")
	}
	if e.context(t, "s")[1].ID != res.CompactionMessageID {
		t.Fatal("resumed compaction not in the context")
	}
}

// Issue 11, sixth defect: two distinct requests, one of which wrote the
// compaction and died before its commit, the other finishing that commit:
// exactly one answers compacted (the one the compaction names, when it is
// redelivered), the other already_compacted.
func TestOneCompactedPerCompaction(t *testing.T) {
	_, _, svc := crashingEnv(t)
	if _, err := svc.Compact(context.Background(), pipeline.Request{ID: "A", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); !errors.Is(err, pipeline.ErrPersistFailed) {
		t.Fatalf("A's crashed commit: %v", err)
	}
	b, err := svc.Compact(context.Background(), pipeline.Request{ID: "B", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || b.Outcome != pipeline.OutcomeAlreadyCompacted || b.Strategy != "resumed" {
		t.Fatalf("B, finishing A's commit: %v %+v", err, b)
	}
	a, err := svc.Compact(context.Background(), pipeline.Request{ID: "A", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || a.Outcome != pipeline.OutcomeCompacted || a.CompactionMessageID != b.CompactionMessageID {
		t.Fatalf("A redelivered: %v %+v", err, a)
	}
	c, err := svc.Compact(context.Background(), pipeline.Request{ID: "C", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || c.Outcome == pipeline.OutcomeCompacted {
		t.Fatalf("a third request: %v %+v", err, c)
	}
}

// A redelivery of the request whose failure opened the breaker answers the
// same failure and reports the opening again (its events have fixed ids),
// instead of circuit_open; its failure is not counted twice.
func TestRedeliveredOpenerAnswersItsFailure(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.BreakerCooldown = 0 // every failure counts
	e, rec := newRecorderEnv(t, cfg)
	e.importSession(t, "s", 3000, chat(30))
	rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		return pipeline.SummaryResponse{}, errors.New("upstream 503"), true
	}
	var last *pipeline.Result
	for i := range 3 {
		last, _ = e.svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprint("r", i), SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	}
	if !last.CircuitOpened {
		t.Fatalf("the third failure did not open the breaker: %+v", last)
	}
	again, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "r2", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if !errors.Is(err, pipeline.ErrSummaryFailed) || !again.CircuitOpened || again.Reason != pipeline.ReasonSummaryFailed || again.Failures != 3 {
		t.Fatalf("the opener redelivered: %v %+v", err, again)
	}
	other, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "r9", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if !errors.Is(err, pipeline.ErrCircuitOpen) || other.CircuitOpened {
		t.Fatalf("another request: %v %+v", err, other)
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Failures != 3 {
		t.Fatalf("breaker %+v", b)
	}
}

func TestKeepFirstUserMessage(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.KeepFirstUserMessage = true
	e, _ := newRecorderEnv(t, cfg)
	msgs := chat(30)
	e.importSession(t, "s", 3000, msgs)
	compact(t, e, "s", pipeline.TriggerOverBudget)
	ctx := e.context(t, "s")
	if ctx[1].Content.Text != msgs[1].Content.Text || !ctx[2].IsCompaction {
		t.Fatalf("first user message not pinned: %q", ctx[1].Content.Text)
	}
}

func TestPinnedTooBigFailsWithoutModelCall(t *testing.T) {
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	msgs := chat(10)
	msgs[0].Content = session.TextContent(strings.Repeat("Policy rule 17 applies to all fares. ", 400))
	e.importSession(t, "s", 3000, msgs)
	// The settings alone allow no compaction: a configuration error, not
	// a failure of the session's (its breaker does not move).
	for i := range 4 {
		res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprint(i), SessionID: "s", Trigger: pipeline.TriggerOverBudget})
		if !errors.Is(err, pipeline.ErrConfiguration) || res.Reason != pipeline.ReasonConfiguration || res.Retryable || res.CircuitOpened ||
			!strings.Contains(res.Error, "context_limit") {
			t.Fatalf("%v %+v", err, res)
		}
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Failures != 0 || b.Open() {
		t.Fatalf("a configuration error counted on the breaker: %+v", b)
	}
	if rec.count.Load() != 0 {
		t.Fatal("a hopeless compaction called the model")
	}
}

// With breaker_cooldown, an open breaker lets one probe through per
// cooldown: a failing probe keeps it open, a succeeding one closes it.
func TestBreakerCooldownProbe(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.BreakerCooldown = pipeline.Duration(time.Minute)
	o := newOutageEnv(t, cfg)
	e, svc, rec := o.env, o.svc, o.rec
	n := 0
	req := func() pipeline.Request { // a new request each time, as a runtime sends them
		n++
		return pipeline.Request{ID: fmt.Sprint("r", n), SessionID: "s", Trigger: pipeline.TriggerOverBudget}
	}
	for range cfg.MaxFailures { // three outages, a cooldown apart
		o.now = o.now.Add(time.Duration(cfg.BreakerCooldown))
		svc.Compact(context.Background(), req())
	}
	if _, err := svc.Compact(context.Background(), req()); !errors.Is(err, pipeline.ErrCircuitOpen) {
		t.Fatalf("inside the cooldown: %v", err)
	}
	calls := rec.count.Load()
	o.now = o.now.Add(2 * time.Minute)
	res, err := svc.Compact(context.Background(), req()) // the probe fails
	if !errors.Is(err, pipeline.ErrSummaryFailed) || rec.count.Load() == calls || res.CircuitOpened {
		t.Fatalf("failed probe: %v %+v", err, res)
	}
	if _, err := svc.Compact(context.Background(), req()); !errors.Is(err, pipeline.ErrCircuitOpen) {
		t.Fatalf("right after a failed probe: %v", err)
	}
	o.failing = false
	o.now = o.now.Add(2 * time.Minute)
	res, err = svc.Compact(context.Background(), req())
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || !res.CircuitClosed {
		t.Fatalf("successful probe: %v %+v", err, res)
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Open() || b.Failures != 0 {
		t.Fatalf("breaker after a successful probe: %+v", b)
	}
}

// A request whose compaction message is the one stored, committed by
// another writer's record move, answers what it did (the CI failure of
// TestClearedCompactionOnKV: it said "redelivered"); a redelivery of it
// then says redelivered.
func TestOvertakenCommitKeepsItsStrategy(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	e, _ := newRecorderEnv(t, cfg)
	e.importSession(t, "s", 8000, agentRun(20, 500))
	svc, err := pipeline.New(&overtakenStore{Store: e.store}, e.breakers, extractive.New(e.counter), cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "cleared" {
		t.Fatalf("overtaken commit: %v %+v", err, res)
	}
	again, err := svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || again.Outcome != pipeline.OutcomeCompacted || again.Strategy != "redelivered" {
		t.Fatalf("redelivery: %v %+v", err, again)
	}
	other, err := svc.Compact(context.Background(), pipeline.Request{ID: "2", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || other.Outcome == pipeline.OutcomeCompacted {
		t.Fatalf("another request: %v %+v", err, other)
	}
}

// Runtimes retrying through one outage of the model (summary_failed,
// retryable) count it once: within a cooldown of the last counted one, a
// retryable failure is answered but not counted. Failures of another kind
// still count each, and the default cooldown is on.
func TestOneOutageCountsOnce(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	if cfg.BreakerCooldown <= 0 {
		t.Fatal("no default breaker cooldown")
	}
	o := newOutageEnv(t, cfg)
	e, svc := o.env, o.svc
	cooldown := time.Duration(cfg.BreakerCooldown)
	for i := range 10 { // ten retries in a 7-second outage
		o.now = o.now.Add(700 * time.Millisecond)
		res, err := svc.Compact(context.Background(), pipeline.Request{ID: fmt.Sprint("o", i), SessionID: "s", Trigger: pipeline.TriggerOverBudget})
		if !errors.Is(err, pipeline.ErrSummaryFailed) || !res.Retryable || res.Failures != 1 || res.CircuitOpened {
			t.Fatalf("retry %d in the outage: %v %+v", i, err, res)
		}
	}
	// The next outage, a cooldown later, counts again.
	o.now = o.now.Add(cooldown)
	if res, _ := svc.Compact(context.Background(), pipeline.Request{ID: "o-next", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); res.Failures != 2 {
		t.Fatalf("a second outage: %+v", res)
	}
	// The model is back: the next request compacts and clears the count.
	o.failing = false
	o.now = o.now.Add(time.Second)
	if res, err := svc.Compact(context.Background(), pipeline.Request{ID: "back", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("after the outage: %v %+v", err, res)
	}
	if b, _ := e.breakers.Breaker(context.Background(), "s"); b.Failures != 0 || b.Open() {
		t.Fatalf("breaker after recovery: %+v", b)
	}
}

// outageEnv is session "s" (30 turns, a 3,000-token limit) on a service
// whose clock is now and whose model answers 503 while failing.
type outageEnv struct {
	env     *env
	svc     *pipeline.Service
	rec     *recorder
	now     time.Time
	failing bool
}

func newOutageEnv(t *testing.T, cfg pipeline.Config) *outageEnv {
	t.Helper()
	o := &outageEnv{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), failing: true}
	o.rec = &recorder{next: extractive.New(counter(t))}
	o.env = newEnv(t, o.rec, cfg)
	svc, err := pipeline.New(o.env.store, o.env.breakers, o.rec, cfg, pipeline.WithClock(func() time.Time { return o.now }))
	if err != nil {
		t.Fatal(err)
	}
	o.svc = svc
	o.env.importSession(t, "s", 3000, chat(30))
	o.rec.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		if o.failing {
			return pipeline.SummaryResponse{}, errors.New("upstream 503"), true
		}
		return pipeline.SummaryResponse{}, nil, false
	}
	return o
}
