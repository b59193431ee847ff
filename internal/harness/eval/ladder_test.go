package eval_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// A tool-heavy run replayed with the ladder and with summary only: the
// ladder makes compactions without a model call and reads less; a chat
// without tools is the same either way.
func TestCompareLadder(t *testing.T) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	run := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent.")},
		{Role: session.RoleUser, Content: session.TextContent("Fix the failing build.")}}
	for i := range 60 {
		id := fmt.Sprintf("c%d", i)
		run = append(run, session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function",
			Function: session.FunctionCall{Name: "bash", Arguments: fmt.Sprintf(`{"cmd":"make step%d"}`, i)}}}},
			session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(strings.Repeat(fmt.Sprintf("compiling unit %d ok\n", i), 60))})
	}
	chat := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are helpful.")}}
	for i := range 200 {
		chat = append(chat, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Tell me fact number %d about the moon, please.", i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Fact %d: the moon is about 384,400 km away and keeps one face to us.", i))})
	}
	convs := []transcript.Conversation{{Name: "swe-agent/synthetic", Source: "swe-agent", Messages: run}, {Name: "chat", Source: "locomo", Messages: chat}}
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	rows, err := eval.CompareLadderSets(context.Background(), convs, counter, extractive.New(counter), cfg, []int{4000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Set != "agent trajectories" || rows[1].Set != "locomo" {
		t.Fatalf("rows %+v", rows)
	}
	agent, talk := rows[0], rows[1]
	if agent.Ladder.Compactions == 0 || agent.Ladder.NoModel == 0 || agent.SummaryOnly.NoModel != 0 || agent.InputRatio >= 1 ||
		agent.Ladder.MeanPrefixKept <= agent.SummaryOnly.MeanPrefixKept {
		t.Fatalf("agent run: %+v", agent)
	}
	if talk.Ladder.InputTokens != talk.SummaryOnly.InputTokens || talk.Ladder.NoModel != 0 || talk.Ladder.Compactions == 0 {
		t.Fatalf("chat: %+v", talk)
	}
	// The pinned head (the system prompt, and the task in the agent run)
	// stays the provider's cached prefix through every compaction.
	for _, s := range []eval.Side{agent.Ladder, agent.SummaryOnly, talk.Ladder, talk.SummaryOnly} {
		if s.HeadKept != 1 {
			t.Fatalf("pinned head kept %.3f: %+v", s.HeadKept, s)
		}
	}
}

// The pinned head of a compacted context is what comes before its
// summary; without one, the leading system messages and the pinned task.
func TestPinnedHead(t *testing.T) {
	sys := session.Message{Role: session.RoleSystem, Tokens: 10}
	task := session.Message{Role: session.RoleUser, Tokens: 7}
	sum := session.Message{Role: session.RoleUser, Tokens: 100, IsCompaction: true}
	reply := session.Message{Role: session.RoleAssistant, Tokens: 50}
	for _, c := range []struct {
		view  []session.Message
		first bool
		want  int
	}{
		{[]session.Message{sys, task, sum, reply}, false, 17},
		{[]session.Message{sum, reply}, true, 0},
		{[]session.Message{sys, task, reply}, true, 17},
		{[]session.Message{sys, task, reply}, false, 10},
		{[]session.Message{sys, sys, reply}, true, 20},
	} {
		if got := eval.PinnedHead(c.view, c.first); got != c.want {
			t.Errorf("PinnedHead(%v, %v) = %d, want %d", c.view, c.first, got, c.want)
		}
	}
}
