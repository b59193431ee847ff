package pipeline_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
)

// agentTurn is an agent's turn drawn from r: a user instruction, then
// steps that call one to three tools (results of 20 to 900 words, now and
// then a huge one) and a closing answer.
func agentTurn(r *rand.Rand, turn int, calls *int) []session.Message {
	word := func(n int) string {
		var sb strings.Builder
		for i := range n {
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(words[r.IntN(len(words))])
		}
		return sb.String()
	}
	out := []session.Message{{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("turn %d: %s", turn, word(5+r.IntN(40))))}}
	for range r.IntN(5) {
		m := session.Message{Role: session.RoleAssistant, Content: session.TextContent(word(r.IntN(30)))}
		var ids []string
		for range 1 + r.IntN(3) {
			*calls++
			id := fmt.Sprintf("call_%d", *calls)
			ids = append(ids, id)
			m.ToolCalls = append(m.ToolCalls, session.ToolCall{ID: id, Type: "function", Function: session.FunctionCall{Name: "bash", Arguments: `{"command":"` + word(4) + `"}`}})
		}
		out = append(out, m)
		for _, id := range ids {
			n := 20 + r.IntN(200)
			if r.IntN(8) == 0 {
				n = 300 + r.IntN(900)
			}
			out = append(out, session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(word(n))})
		}
	}
	return append(out, session.Message{Role: session.RoleAssistant, Content: session.TextContent(word(10 + r.IntN(60)))})
}

// briefModel is a summary model that writes a short summary in the
// template whatever it is given (as make chaos's stand-in does).
type briefModel struct{}

func (briefModel) Summarize(_ context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	text := "## Goal\n- continue the user's task\n## User instructions\n- (none)\n## Decisions\n- (none)\n## Facts and identifiers\n- flight HAT069 on 2024-05-20\n## Files and artifacts\n- (none)\n## Errors and fixes\n- (none)\n## Open tasks\n- (none)\n"
	return pipeline.SummaryResponse{Text: text, Model: "brief"}, nil
}

// An agent's loop at small and usual windows, with the default settings:
// it appends every message as it comes (a step's call before its results)
// and asks for a compaction whenever its context is over the limit, so
// requests also come while a call waits for its results. Every request is
// answered compacted (or already so) with the context under its limit, and
// no breaker counts a failure. (Issue 42: a cut after a call still waiting
// for its result left the result without its call, invariant_violated
// three times and the breaker open; a step too big for the window failed
// insufficient_progress and opened breakers, or was answered "already
// compacted" over the limit.)
func TestAgentLoopAtSmallWindows(t *testing.T) {
	for _, model := range []string{"extractive", "brief"} {
		for _, limit := range []int{1200, 1500, 2000, 3000, 8000} {
			t.Run(fmt.Sprint(model, "/", limit), func(t *testing.T) {
				var sum pipeline.Summarizer
				if model == "brief" {
					sum = briefModel{}
				}
				e := newEnv(t, sum, pipeline.DefaultConfig())
				ctx := context.Background()
				requests := 0
				seeds, turns := 3, 40
				if raceEnabled {
					seeds, turns = 1, 30
				}
				for seed := range seeds {
					sid := fmt.Sprint("agent-", seed)
					sys := session.Message{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent. Use the tools.")}
					e.importSession(t, sid, limit, []session.Message{sys})
					tokens := e.counter.Context(e.context(t, sid))
					r := rand.New(rand.NewPCG(uint64(seed), uint64(limit)))
					calls := 0
					for turn := range turns {
						for _, m := range agentTurn(r, turn, &calls) {
							e.counter.Ensure(&m)
							if _, err := e.store.Append(ctx, sid, m); err != nil {
								t.Fatal(err)
							}
							if tokens += m.Tokens; tokens <= limit {
								continue
							}
							requests++
							res, err := e.svc.Compact(ctx, pipeline.Request{ID: fmt.Sprint(sid, "-", requests), SessionID: sid, Trigger: pipeline.TriggerOverBudget})
							if err != nil {
								t.Fatalf("request %d at turn %d (%d tokens): %v", requests, turn, tokens, err)
							}
							if tokens = e.counter.Context(e.context(t, sid)); tokens > limit {
								t.Fatalf("request %d at turn %d left %d tokens, over the limit %d: %s/%s", requests, turn, tokens, limit, res.Outcome, res.Strategy)
							}
						}
						// As a provider takes it: every result after its call.
						if err := pairedResults(e.context(t, sid)); err != nil {
							t.Fatalf("turn %d: %v", turn, err)
						}
					}
					if b, err := e.breakers.Breaker(ctx, sid); err != nil || b.Failures != 0 {
						t.Fatalf("breaker of %s: %+v %v", sid, b, err)
					}
				}
				t.Logf("%d requests, every one answered under the limit", requests)
			})
		}
	}
}

// pairedResults says which tool result of a context comes without its call
// before it (a provider refuses such a context).
func pairedResults(msgs []session.Message) error {
	called := map[string]bool{}
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			called[tc.ID] = true
		}
		if m.Role == session.RoleTool && !called[m.ToolCallID] {
			return fmt.Errorf("tool result %s (seq %d) without its call", m.ToolCallID, m.Seq)
		}
	}
	return nil
}
