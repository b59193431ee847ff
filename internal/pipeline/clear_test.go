package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
)

// agentRun builds an agent session: a system prompt and a task, then steps
// of a tool call and its result of about resultWords words (the tool named
// by tools in turn), with a user follow-up every fifth step.
func agentRun(steps, resultWords int, tools ...string) []session.Message {
	if len(tools) == 0 {
		tools = []string{"bash"}
	}
	out := []session.Message{
		{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent. Use the tools to fix the failing test.")},
		{Role: session.RoleUser, Content: session.TextContent("The test TestParse fails with a nil pointer in parser.go; fix it.")},
	}
	for i := range steps {
		tool := tools[i%len(tools)]
		id := fmt.Sprintf("call_%d", i)
		out = append(out,
			session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function",
				Function: session.FunctionCall{Name: tool, Arguments: fmt.Sprintf(`{"cmd":"step %d: cat src/file_%d.go"}`, i, i)}}}},
			session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(strings.Repeat(fmt.Sprintf("line of output %d from %s ", i, tool), resultWords/6+1))},
		)
		if i%5 == 4 {
			out = append(out, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Step %d done? Keep going.", i))})
		}
	}
	return out
}

func numbered(t *testing.T, msgs []session.Message) []session.Message {
	c := counter(t)
	for i := range msgs {
		msgs[i].Seq = int64(i + 1)
		if msgs[i].ID == "" {
			msgs[i].ID = fmt.Sprintf("m%d", i+1)
		}
		c.Ensure(&msgs[i])
	}
	return msgs
}

func TestPlanClear(t *testing.T) {
	c := counter(t)
	// After the system prompt and task: 10 steps (call, result), results of
	// ~400 tokens, one small, tools alternating bash / read_file.
	msgs := numbered(t, agentRun(10, 400, "bash", "read_file")[2:])
	msgs[3].Content = session.TextContent("ok") // a small result (step 1)
	c.Ensure(&msgs[3])
	msgs[3].Tokens = c.Message(&msgs[3])
	results := func(p pipeline.ClearPlan) (seqs []int64) {
		for _, x := range p.Cleared {
			seqs = append(seqs, x.Seq)
		}
		return seqs
	}
	base := pipeline.ClearInput{Messages: msgs, Tail: len(msgs), KeepToolResults: 3, MinTokens: 100, Need: 1 << 30, Count: c.Message}
	tests := []struct {
		name string
		mod  func(*pipeline.ClearInput)
		want string // the cleared seqs
	}{
		{"every old result but the last three, the small one kept", nil, "[2 6 8 10 13 15]"},
		{"the raw tail is never cleared", func(in *pipeline.ClearInput) { in.Tail = 8 }, "[2 6 8]"},
		{"keep_tool_results 0", func(in *pipeline.ClearInput) { in.KeepToolResults = 0 }, "[2 6 8 10 13 15 17 19 21]"},
		{"an excluded tool stays", func(in *pipeline.ClearInput) { in.ExcludeTools = []string{"read_file"} }, "[2 6 10 15]"},
		{"oldest first, only what is needed", func(in *pipeline.ClearInput) { in.Need = 500 }, "[2 6]"},
		{"at least clear_at_least", func(in *pipeline.ClearInput) { in.Need, in.AtLeast = 100, 1000 }, "[2 6 8]"},
		{"too little to clear: nothing", func(in *pipeline.ClearInput) { in.Tail, in.AtLeast = 4, 1000 }, "[]"},
		{"cleared before stays as it is", func(in *pipeline.ClearInput) { in.Already = map[int64]bool{2: true, 6: true} }, "[8 10 13 15]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			if tt.mod != nil {
				tt.mod(&in)
			}
			p := pipeline.PlanClear(in)
			if got := fmt.Sprint(results(p)); got != tt.want && !(tt.want == "[]" && got == "[]") {
				t.Fatalf("cleared %s, want %s", got, tt.want)
			}
			saved := 0
			for _, x := range p.Cleared {
				m := msgs[x.Seq-1]
				if m.Role != session.RoleTool || x.ID != m.ID || x.Tokens != m.Tokens || x.Kind != session.ClearedResult {
					t.Fatalf("cleared %+v is not the tool result %+v", x, m)
				}
				r := pipeline.RenderCleared(m, x)
				saved += m.Tokens - c.Message(&r)
			}
			if saved != p.Saved {
				t.Fatalf("saved %d, the placeholders save %d", p.Saved, saved)
			}
		})
	}
	// Large tool-call arguments, with clear_tool_inputs.
	big := numbered(t, agentRun(4, 50))
	big[2].ToolCalls[0].Function.Arguments = `{"path":"a.go","content":"` + strings.Repeat("package main // more code ", 80) + `"}`
	big[2].Tokens = c.Message(&big[2])
	p := pipeline.PlanClear(pipeline.ClearInput{Messages: big, Tail: len(big), KeepToolResults: 3, MinTokens: 100, Inputs: true, Need: 1 << 30, Count: c.Message})
	if len(p.Cleared) != 1 || p.Cleared[0].Kind != session.ClearedArguments || p.Cleared[0].Seq != 3 {
		t.Fatalf("arguments: %+v", p.Cleared)
	}
	r := pipeline.RenderCleared(big[2], p.Cleared[0])
	var args map[string]string
	if err := json.Unmarshal([]byte(r.ToolCalls[0].Function.Arguments), &args); err != nil || !strings.Contains(args["cleared"], "message 3") ||
		r.ToolCalls[0].ID != big[2].ToolCalls[0].ID || r.ToolCalls[0].Function.Name != "bash" {
		t.Fatalf("cleared arguments %+v: %v", r.ToolCalls, err)
	}
}

func TestRenderCleared(t *testing.T) {
	m := session.Message{ID: "m7", Seq: 7, Role: session.RoleTool, ToolCallID: "call_3", Content: session.TextContent("a long output"), Tokens: 900}
	r := pipeline.RenderCleared(m, session.Cleared{Seq: 7, ID: "m7", Kind: session.ClearedResult, Tool: "run_tests", Tokens: 900})
	for _, want := range []string{"run_tests", "900 tokens", "message 7", "expand_history tool_call_id=call_3"} {
		if !strings.Contains(r.Content.Text, want) {
			t.Errorf("placeholder %q lacks %q", r.Content.Text, want)
		}
	}
	if r.ToolCallID != "call_3" || r.ID != "m7" || r.Role != session.RoleTool || r.Tokens != 0 || m.Content.Text != "a long output" {
		t.Fatalf("rendered %+v (original %+v)", r, m)
	}
}

func TestPrefixKept(t *testing.T) {
	before := numbered(t, agentRun(3, 60))
	same := append([]session.Message(nil), before...)
	if got, all := pipeline.PrefixKept(before, same), sum(before); got != all {
		t.Fatalf("identical: %d, want %d", got, all)
	}
	changed := append([]session.Message(nil), before...)
	changed[5] = pipeline.RenderCleared(changed[5], session.Cleared{Seq: 6, ID: changed[5].ID, Tool: "bash", Tokens: changed[5].Tokens})
	if got, want := pipeline.PrefixKept(before, changed), sum(before[:5]); got != want {
		t.Fatalf("changed at 5: %d, want %d", got, want)
	}
	// The store's ids do not matter, only what the model is sent.
	renamed := append([]session.Message(nil), before...)
	renamed[1].ID, renamed[1].IsCompaction = "other", true
	if got := pipeline.PrefixKept(before, renamed); got != sum(before) {
		t.Fatalf("renamed: %d", got)
	}
	if got := pipeline.PrefixKept(before, before[:2]); got != sum(before[:2]) {
		t.Fatalf("shorter: %d", got)
	}
	if got := pipeline.PrefixKept(before, nil); got != 0 {
		t.Fatalf("empty: %d", got)
	}
}

func sum(msgs []session.Message) int {
	n := 0
	for _, m := range msgs {
		n += m.Tokens
	}
	return n
}

// The ladder on an agent run over its limit: clearing alone brings it under
// target, so no model is called; the pairs stay, pinned and tail are
// untouched, the placeholders say where the originals are, the originals
// are recalled, and a later compaction keeps them cleared.
func TestLadderClearsWithoutModel(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	e, rec := newRecorderEnv(t, cfg)
	msgs := agentRun(20, 500)
	e.importSession(t, "s", 8000, msgs)
	before := e.context(t, "s")
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "cleared" || res.LLMCalls != 0 || len(rec.requests()) != 0 {
		t.Fatalf("result %+v, %d model calls", res, len(rec.requests()))
	}
	if res.ToolResultsCleared == 0 || res.ClearedTokens <= 0 || res.TokensAfter >= res.TokensBefore || res.TokensAfter > int(cfg.HeadroomRatio*8000) {
		t.Fatalf("cleared %d (%d tokens): %d -> %d", res.ToolResultsCleared, res.ClearedTokens, res.TokensBefore, res.TokensAfter)
	}
	after := e.context(t, "s")
	if len(after) != len(before) {
		t.Fatalf("clearing dropped messages: %d -> %d", len(before), len(after))
	}
	all, _, _ := e.store.History(context.Background(), "s")
	if err := eval.CheckContext(all, after, e.counter.Context(after), 8000, e.counter, cfg.MaxSummaryTokens); err != nil {
		t.Fatal(err)
	}
	firstCleared := -1
	for i := range after {
		cleared := strings.HasPrefix(after[i].Content.Text, pipeline.ClearedPrefix)
		if cleared && firstCleared < 0 {
			firstCleared = i
		}
		if i < 2 && cleared || i >= len(after)-2*cfg.KeepToolResults && cleared {
			t.Fatalf("message %d (pinned, task or among the last results) cleared", i)
		}
		if cleared {
			orig, err := e.store.Message(context.Background(), "s", after[i].Seq)
			if err != nil || orig.Content.Text != all[i].Content.Text || !strings.Contains(after[i].Content.Text, fmt.Sprintf("message %d", orig.Seq)) {
				t.Fatalf("recall of seq %d: %v", after[i].Seq, err)
			}
		}
	}
	if want := sum(before[:firstCleared]); res.PrefixKeptTokens != want {
		t.Fatalf("prefix kept %d, want the %d tokens before the first cleared message", res.PrefixKeptTokens, want)
	}

	// More steps: the next compaction keeps what was cleared cleared, and
	// clears on from there, so the prefix before it stays.
	more := agentRun(12, 500)[2:]
	for i := range more {
		more[i].ID = ""
		if more[i].ToolCallID != "" {
			more[i].ToolCallID += "b"
		}
		for j := range more[i].ToolCalls {
			more[i].ToolCalls[j].ID += "b"
		}
		e.counter.Ensure(&more[i])
	}
	if _, err := e.store.Append(context.Background(), "s", more...); err != nil {
		t.Fatal(err)
	}
	mid := e.context(t, "s")
	res2 := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res2.Outcome != pipeline.OutcomeCompacted || res2.Strategy != "cleared" || res2.LLMCalls != 0 {
		t.Fatalf("second: %+v", res2)
	}
	after2 := e.context(t, "s")
	for i := range after {
		if i < firstCleared || !strings.HasPrefix(after[i].Content.Text, pipeline.ClearedPrefix) {
			continue
		}
		if after2[i].Content.Text != after[i].Content.Text {
			t.Fatalf("message %d was cleared and is no longer: %q", i, after2[i].Content.Text)
		}
	}
	if res2.PrefixKeptTokens < sum(mid[:firstCleared]) {
		t.Fatalf("the second clearing kept %d tokens of prefix, less than before the first cleared message", res2.PrefixKeptTokens)
	}
}

// The steps of the ladder are configured: summary only calls the model on
// the same run; clearing only refuses what it cannot fix; exclusions are
// respected; and when clearing is not enough, the summary reads the
// cleared context.
func TestLadderConfig(t *testing.T) {
	run := func(mod func(*pipeline.Config), limit int) (*pipeline.Result, error, *recorder, *env) {
		cfg := pipeline.DefaultConfig()
		cfg.MaxMessages = 0
		mod(&cfg)
		e, rec := newRecorderEnv(t, cfg)
		e.importSession(t, "s", limit, agentRun(20, 500, "bash", "read_file"))
		res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "r", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
		return res, err, rec, e
	}
	res, err, rec, _ := run(func(c *pipeline.Config) { c.Reductions = []string{pipeline.StepSummarise} }, 8000)
	if err != nil || res.Strategy == "cleared" || res.LLMCalls == 0 || len(rec.requests()) == 0 || res.ToolResultsCleared != 0 {
		t.Fatalf("summary only: %+v %v", res, err)
	}
	_, err, _, _ = run(func(c *pipeline.Config) {
		c.Reductions = []string{pipeline.StepClear}
		c.ExcludeTools = []string{"bash", "read_file"}
	}, 8000)
	if err == nil || !strings.Contains(err.Error(), "no summary step") && !strings.Contains(err.Error(), "insufficient") {
		t.Fatalf("clear only, nothing clearable: %v", err)
	}
	res, err, _, e := run(func(c *pipeline.Config) { c.ExcludeTools = []string{"read_file"} }, 8000)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range e.context(t, "s") {
		if m.Role == session.RoleTool && strings.HasPrefix(m.Content.Text, pipeline.ClearedPrefix) && strings.Contains(m.Content.Text, "read_file") {
			t.Fatalf("an excluded tool's result was cleared: %s", m.Content.Text)
		}
	}
	// Clearing cannot reach the target at this limit: the summary follows,
	// and reads the old results as their placeholders.
	res, err, rec, _ = run(func(*pipeline.Config) {}, 3000)
	if err != nil || res.Strategy == "cleared" || res.LLMCalls == 0 {
		t.Fatalf("clear then summarise: %+v %v", res, err)
	}
	placeholders := 0
	for _, r := range rec.requests() {
		for _, m := range r.Messages {
			if strings.HasPrefix(m.Content.Text, pipeline.ClearedPrefix) {
				placeholders++
			}
		}
	}
	if placeholders == 0 {
		t.Fatal("the summary read the tool results clearing had replaced")
	}
}

// Issue 13's first defect: a 61-message chat under the message-count
// trigger came out bigger (791 -> 840 tokens). A summary is now never
// longer than what it replaces.
func TestCompactionNeverGrowsTheContext(t *testing.T) {
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a helpful assistant. Answer briefly.")}}
	for i := range 60 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("What is %d plus %d?", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("%d.", 2*i))})
	}
	e := newEnv(t, nil, pipeline.DefaultConfig())
	e.importSession(t, "s", 128000, msgs)
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.Decision != pipeline.DecisionMessages {
		t.Fatalf("result %+v", res)
	}
	if res.TokensAfter >= res.TokensBefore || len(e.context(t, "s")) > pipeline.DefaultConfig().MaxMessages {
		t.Fatalf("the compaction grew the context: %d -> %d tokens", res.TokensBefore, res.TokensAfter)
	}
}

// Issue 13's second defect: a tau-bench session at a 2,500-token limit was
// refused ("leaves about 2509 tokens (pinned 1255, summary up to 1040, tail
// 214)") although a shorter summary fits. The budget is now what the
// window leaves. The same shape: a long pinned policy, short turns.
func TestSummaryBudgetIsWhatTheWindowLeaves(t *testing.T) {
	c := counter(t)
	policy := "Airline policy. "
	for c.Count(policy) < 1290 {
		policy += "Agents must verify the user id and the reservation before any change, and never refund a basic economy fare. "
	}
	msgs := []session.Message{{Role: session.RoleSystem, Content: session.TextContent(policy)}}
	for i := range 60 {
		msgs = append(msgs, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Turn %d: can I change flight HAT%03d to a later one today?", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Yes: flight HAT%03d has seats at 18:%02d; shall I book it?", i+1, i))})
	}
	cfg := pipeline.DefaultConfig()
	e := newEnv(t, nil, cfg)
	e.importSession(t, "s", 2500, msgs)
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "r", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.TokensAfter > 2500 {
		t.Fatalf("%+v %v", res, err)
	}
	if res.SummaryTokens > 2500-1290-40 {
		t.Fatalf("a summary of %d tokens in a window that leaves less", res.SummaryTokens)
	}
}

// The placeholder counts PlanClear caches depend only on the tool and the
// numbers' lengths, as it assumes: checked against a real count for many
// numbers in both encodings.
func TestPlaceholderCounts(t *testing.T) {
	for _, enc := range []string{"cl100k_base", "o200k_base"} {
		c, err := tokens.ForEncoding(enc)
		if err != nil {
			t.Fatal(err)
		}
		byShape := map[string]int{}
		for _, tokensN := range []int{100, 101, 199, 593, 999, 1000, 1234, 9999, 20284, 123456, 999999, 1000000} {
			for _, seq := range []int64{1, 7, 10, 42, 99, 100, 555, 1000, 4321, 99999} {
				for _, tool := range []string{"bash", "read_file", "str_replace_editor", ""} {
					m := session.Message{Seq: seq, ID: "x", Role: session.RoleTool, ToolCallID: "call_1", Content: session.TextContent("out")}
					r := pipeline.RenderCleared(m, session.Cleared{Seq: seq, ID: "x", Kind: session.ClearedResult, Tool: tool, Tokens: tokensN})
					n := c.Message(&r)
					shape := fmt.Sprintf("%s/%d/%d", tool, len(fmt.Sprint(tokensN)), len(fmt.Sprint(seq)))
					if prev, ok := byShape[shape]; ok && prev != n {
						t.Fatalf("%s: %q counts %d, another of its shape %d", enc, r.Content.Text, n, prev)
					}
					byShape[shape] = n
				}
			}
		}
	}
}

// A tool result cleared by one compaction is read whole by the ledger of
// the summary that later covers it: the error it reported survives the
// clearing.
func TestClearedErrorReachesTheLedger(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	e := newEnv(t, scripted(forgetfulSummary), cfg)
	msgs := agentRun(20, 500)
	const failure = "ValueError: bad header in part 7"
	msgs[3].Content = session.TextContent("Traceback (most recent call last):\n  File \"parser.py\", line 3\n" + failure + "\n" + msgs[3].Content.Text)
	e.importSession(t, "s", 8000, msgs)
	if res := compact(t, e, "s", pipeline.TriggerOverBudget); res.Strategy != "cleared" || !strings.HasPrefix(e.context(t, "s")[3].Content.Text, pipeline.ClearedPrefix) {
		t.Fatalf("first compaction %+v: the failing result must be cleared", res)
	}
	// Talk that clearing cannot shrink: the next compaction summarises.
	var more []session.Message
	for i := range 8 {
		m := session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Thinking about step %d. ", i) + strings.Repeat("The parser keeps its state per line. ", 60))}
		e.counter.Ensure(&m)
		more = append(more, m)
	}
	if _, err := e.store.Append(context.Background(), "s", more...); err != nil {
		t.Fatal(err)
	}
	res := compact(t, e, "s", pipeline.TriggerOverBudget)
	if res.Outcome != pipeline.OutcomeCompacted || res.LLMCalls == 0 {
		t.Fatalf("second compaction %+v", res)
	}
	i := slices.IndexFunc(e.context(t, "s"), func(m session.Message) bool { return m.IsCompaction })
	meta := e.context(t, "s")[i].Compaction
	s, _ := summary.Parse(meta.SummaryText)
	if errs := strings.Join(s.Sections[summary.Errors], "\n"); !strings.Contains(errs, failure) {
		t.Fatalf("the cleared result's error is not in the summary:\n%s", meta.SummaryText)
	}
}

// The runtime's cache state steers clearing: with a warm cache a request
// clears only what the target needs (each batch costs the cached prefix
// from its first message on); with a lapsed one, the next call writes the
// whole context anyway, so it clears every old result it may, and the
// next compaction comes later. A cache that says nothing clears as a warm
// one; a cache used after the request's own time is refused.
func TestCacheStateSteersClearing(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	e, rec := newRecorderEnv(t, cfg)
	msgs := agentRun(30, 500)
	for _, id := range []string{"unknown", "warm", "cold"} {
		e.importSession(t, id, 12000, msgs)
	}
	at := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	run := func(id string, cache *pipeline.CacheState) *pipeline.Result {
		t.Helper()
		res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "req-" + id, SessionID: id, Trigger: pipeline.TriggerOverBudget, Cache: cache, At: at})
		if err != nil || res.Outcome != pipeline.OutcomeCompacted || res.Strategy != "cleared" {
			t.Fatalf("%s: %+v, %v", id, res, err)
		}
		return res
	}
	unknown := run("unknown", nil)
	warm := run("warm", &pipeline.CacheState{LastRequest: at.Add(-time.Minute), TTL: 5 * time.Minute})
	cold := run("cold", &pipeline.CacheState{LastRequest: at.Add(-10 * time.Minute), TTL: 5 * time.Minute})
	if len(rec.requests()) != 0 {
		t.Fatalf("%d model calls", len(rec.requests()))
	}
	if unknown.CacheState != "" || warm.CacheState != pipeline.CacheWarm || cold.CacheState != pipeline.CacheCold {
		t.Fatalf("cache states %q %q %q", unknown.CacheState, warm.CacheState, cold.CacheState)
	}
	if warm.ToolResultsCleared != unknown.ToolResultsCleared || warm.TokensAfter != unknown.TokensAfter {
		t.Fatalf("a warm cache cleared otherwise than an unknown one: %+v vs %+v", warm, unknown)
	}
	// Cold: every result but the last keep_tool_results (and those in the
	// raw tail) is cleared, well past what the target needed.
	if cold.ToolResultsCleared <= warm.ToolResultsCleared || cold.TokensAfter >= warm.TokensAfter {
		t.Fatalf("a cold cache cleared %d results (to %d tokens), a warm one %d (to %d)", cold.ToolResultsCleared, cold.TokensAfter,
			warm.ToolResultsCleared, warm.TokensAfter)
	}
	t.Logf("12,000-token window, %d tokens: warm cache cleared %d results (to %d tokens), cold %d (to %d)", warm.TokensBefore,
		warm.ToolResultsCleared, warm.TokensAfter, cold.ToolResultsCleared, cold.TokensAfter)
	after := e.context(t, "cold")
	raw := 0
	for i := range after {
		if after[i].Role == session.RoleTool && !strings.HasPrefix(after[i].Content.Text, pipeline.ClearedPrefix) {
			raw++
		}
	}
	if raw > cfg.KeepToolResults+cfg.KeepRecentTurns {
		t.Fatalf("a cold cache left %d results raw", raw)
	}
	// Both begin where the oldest result is: the prefix kept is the same.
	if cold.PrefixKeptTokens != warm.PrefixKeptTokens {
		t.Fatalf("prefix kept: cold %d, warm %d", cold.PrefixKeptTokens, warm.PrefixKeptTokens)
	}
	// The redelivered request answers the same state.
	again, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "req-cold", SessionID: "cold", Trigger: pipeline.TriggerOverBudget,
		Cache: &pipeline.CacheState{LastRequest: at.Add(-10 * time.Minute), TTL: 5 * time.Minute}, At: at})
	if err != nil || again.Strategy != "redelivered" || again.CacheState != pipeline.CacheCold || again.ToolResultsCleared != cold.ToolResultsCleared {
		t.Fatalf("redelivery: %+v, %v", again, err)
	}

	for name, c := range map[string]*pipeline.CacheState{
		"used after the request": {LastRequest: at.Add(5 * time.Minute), TTL: time.Minute},
		"negative ttl":           {LastRequest: at.Add(-time.Minute), TTL: -time.Second},
		"no last request":        {TTL: time.Minute},
	} {
		res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "bad", SessionID: "warm", Trigger: pipeline.TriggerOverBudget, Cache: c, At: at})
		if !errors.Is(err, pipeline.ErrInvalidRequest) || res.Reason != pipeline.ReasonInvalidRequest {
			t.Fatalf("%s: %+v, %v", name, res, err)
		}
	}
}
