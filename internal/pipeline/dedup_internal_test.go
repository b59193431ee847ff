package pipeline

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
)

// No section says what another says: a goal restating the task the
// working state quotes, a raw tool call the ledger records, a bullet the
// ledger already holds are the summariser's repeats and are dropped; what
// only the summariser says stays.
func TestSummaryDoesNotRepeatTheLedger(t *testing.T) {
	c, _ := tokens.ForEncoding("o200k_base")
	task := "Fix the failing date parser in utils/dates.py so that ISO week dates parse, and add a regression test."
	msgs := []session.Message{
		{Seq: 1, Role: session.RoleUser, Content: session.TextContent(task)},
		{Seq: 2, Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Type: "function", Function: session.FunctionCall{Name: "Read", Arguments: `{"file_path": "/repo/utils/dates.py"}`}}}},
		{Seq: 3, Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent("def parse(s): ...")},
		{Seq: 4, Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c2", Type: "function", Function: session.FunctionCall{Name: "Write", Arguments: `{"file_path": "/repo/tests/test_week.py", "content": "def test_week(): ..."}`}}}},
		{Seq: 5, Role: session.RoleTool, ToolCallID: "c2", Content: session.TextContent("File created successfully at: /repo/tests/test_week.py")},
	}
	l := ledger.Extract(ledgerMessages(msgs))
	r := ledger.RenderWithState(l, c.Count, 400, 200)
	if len(r.State) == 0 || !strings.HasPrefix(r.State[0], ledger.TaskPrefix) {
		t.Fatalf("the working state quotes no task: %q", r.State)
	}
	text := "## Goal\n- Fix the failing ISO week date parser in utils/dates.py and add a regression test\n- Keep the public API unchanged\n\n" +
		"## Facts and identifiers\n- assistant: called Read {\"file_path\": \"/repo/utils/dates.py\"}\n- assistant: called Write {\"file_path\": \"/repo/tests/test_week.py\", \"content\": \"def te…\n- the parser splits on 'W' before the weekday\n\n" +
		"## Files and artifacts\n- " + r.Files[0] + "\n"
	out, _ := summary.Parse(withLedger(c, text, l, r, nil, 1000))
	for _, b := range out.Sections[summary.Goal] {
		if strings.Contains(b, "regression test") {
			t.Errorf("the goal restates the task the working state quotes: %q", b)
		}
	}
	if !contains(out.Sections[summary.Goal], "Keep the public API unchanged") {
		t.Errorf("a goal the task does not say was dropped: %q", out.Sections[summary.Goal])
	}
	for _, b := range out.Sections[summary.Facts] {
		if strings.Contains(b, "called Read") || strings.Contains(b, "called Write") {
			t.Errorf("a raw tool call the ledger records is repeated: %q", b)
		}
	}
	if !contains(out.Sections[summary.Facts], "the parser splits on 'W' before the weekday") {
		t.Errorf("a fact only the summariser has was dropped: %q", out.Sections[summary.Facts])
	}
	if n := strings.Count(strings.Join(out.Sections[summary.Files], "\n"), r.Files[0]); n != 1 {
		t.Errorf("the ledger's files bullet is there %d times: %q", n, out.Sections[summary.Files])
	}
	// The file the agent wrote is created, not read.
	for _, b := range out.Sections[summary.Files] {
		if strings.HasPrefix(b, "read:") && strings.Contains(b, "test_week.py") {
			t.Errorf("a file written is listed as read: %q", b)
		}
	}
}

func contains(bullets []string, s string) bool {
	for _, b := range bullets {
		if b == s {
			return true
		}
	}
	return false
}
