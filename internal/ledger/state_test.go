package ledger_test

import (
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/ledger"
)

func call(id, name, args string, seq int64) ledger.Message {
	return ledger.Message{Role: "assistant", Seq: seq, ToolCalls: []ledger.Call{{ID: id, Name: name, Arguments: args}}}
}

func statuses(p *ledger.Plan) map[string]string {
	out := map[string]string{}
	if p != nil {
		for _, it := range p.Items {
			out[it.Text] = it.Status
		}
	}
	return out
}

// The planning tools of the runtimes in use write the whole list each
// time: Claude Code's TodoWrite, Codex's update_plan, OpenHands'
// task_tracker. The last call is the plan, with each item's status.
func TestPlanFromPlanningTools(t *testing.T) {
	for _, tc := range []struct {
		name, tool, first, last string
	}{
		{"TodoWrite", "TodoWrite",
			`{"todos":[{"content":"Reproduce the crash","status":"in_progress","activeForm":"Reproducing"},{"content":"Fix the parser","status":"pending","activeForm":"Fixing"}]}`,
			`{"todos":[{"content":"Reproduce the crash","status":"completed","activeForm":"Reproducing"},{"content":"Fix the parser","status":"in_progress","activeForm":"Fixing"},{"content":"Run the test suite","status":"pending","activeForm":"Running"}]}`},
		{"update_plan", "update_plan",
			`{"explanation":"start","plan":[{"step":"Reproduce the crash","status":"in_progress"},{"step":"Fix the parser","status":"pending"}]}`,
			`{"plan":[{"step":"Reproduce the crash","status":"completed"},{"step":"Fix the parser","status":"in_progress"},{"step":"Run the test suite","status":"pending"}]}`},
		{"task_tracker", "task_tracker",
			`{"command":"plan","task_list":[{"id":"1","title":"Reproduce the crash","status":"todo","notes":""},{"id":"2","title":"Fix the parser","status":"todo"}]}`,
			`{"command":"plan","task_list":[{"id":"1","title":"Reproduce the crash","status":"done"},{"id":"2","title":"Fix the parser","status":"in_progress"},{"id":"3","title":"Run the test suite","status":"todo"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ledger.Extract([]ledger.Message{
				{Role: "user", Seq: 1, Text: "The parser crashes on empty input."},
				call("a", tc.tool, tc.first, 2),
				{Role: "tool", Seq: 3, ToolCallID: "a", Text: "ok"},
				call("b", "task_tracker", `{"command":"view"}`, 4), // a view writes no plan
				{Role: "tool", Seq: 5, ToolCallID: "b", Text: "1. Reproduce the crash [todo]"},
				call("c", tc.tool, tc.last, 6),
				{Role: "tool", Seq: 7, ToolCallID: "c", Text: "ok"},
			})
			want := map[string]string{"Reproduce the crash": ledger.PlanDone, "Fix the parser": ledger.PlanInProgress, "Run the test suite": ledger.PlanPending}
			if got := statuses(l.Plan); len(got) != 3 || got["Reproduce the crash"] != want["Reproduce the crash"] || got["Fix the parser"] != want["Fix the parser"] || got["Run the test suite"] != want["Run the test suite"] {
				t.Fatalf("plan %+v", l.Plan)
			}
			if l.Plan.From != tc.tool || l.Plan.Seq != 6 || len(l.InFlight) != 0 {
				t.Fatalf("plan from %q at %d, in flight %+v", l.Plan.From, l.Plan.Seq, l.InFlight)
			}
			if !l.Done("Reproduce the crash with an empty file") || !l.Done("reproduce the crash") || l.Done("Fix the parser") || l.Done("crash") {
				t.Fatal("Done misjudges the items")
			}
			r := ledger.Render(l, func(s string) int { return len(strings.Fields(s)) }, 1000)
			state := strings.Join(r.State, "\n")
			for _, w := range []string{"[done] Reproduce the crash", "[in progress] Fix the parser", "[pending] Run the test suite", "1 done, 1 in progress, 1 pending", "task, as the user gave it: The parser crashes on empty input."} {
				if !strings.Contains(state, w) {
					t.Errorf("state lacks %q:\n%s", w, state)
				}
			}
		})
	}
}

// A checklist in the assistant's text is a plan with statuses; a numbered
// list under "plan:" is one without, and does not replace a tracked plan.
func TestPlanFromText(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "user", Seq: 1, Text: "Fix it."},
		{Role: "assistant", Seq: 2, Text: "My plan is:\n1. Modify `src/_pytest/python.py` to drop the prefix\n2. Add a regression test\n\nLet's start."},
	})
	if l.Plan == nil || l.Plan.From != "stated" || len(l.Plan.Items) != 2 || l.Plan.Items[1].Status != ledger.PlanStated || l.Done("Add a regression test") {
		t.Fatalf("stated plan %+v", l.Plan)
	}
	l = ledger.Merge(l, ledger.Extract([]ledger.Message{
		{Role: "assistant", Seq: 3, Text: "Progress:\n- [x] Modify the prefix handling\n- [ ] Add a regression test\n- [~] Update the changelog"},
		{Role: "assistant", Seq: 4, Text: "New plan:\n1. Something else\n2. And more"},
	}))
	got := statuses(l.Plan)
	if l.Plan.From != "checklist" || got["Modify the prefix handling"] != ledger.PlanDone || got["Add a regression test"] != ledger.PlanPending || got["Update the changelog"] != ledger.PlanInProgress {
		t.Fatalf("checklist plan %+v", l.Plan)
	}
}

// A question asking leave to act and the user's answer: approved or
// declined, remembered; a question for information is no approval.
func TestApprovals(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "user", Seq: 1, Text: "I want to downgrade my reservations."},
		{Role: "assistant", Seq: 2, Text: "Could you please provide your user ID?"},
		{Role: "user", Seq: 3, Text: "Sure, it's omar_davis_3817."},
		{Role: "assistant", Seq: 4, Text: "The total refund is $327. Would you like to proceed with downgrading these reservations to economy class? Please confirm, and I'll take care of it for you."},
		{Role: "user", Seq: 5, Text: "Yes, please downgrade all of them to economy class."},
		{Role: "assistant", Seq: 6, Text: "Shall I also cancel the travel insurance?"},
		{Role: "user", Seq: 7, Text: "No, keep it."},
	})
	if len(l.Approvals) != 2 {
		t.Fatalf("approvals %+v", l.Approvals)
	}
	a, d := l.Approvals[0], l.Approvals[1]
	if !a.Approved || !strings.Contains(a.Asked, "Would you like to proceed with downgrading these reservations") || a.Seq != 5 || !strings.HasPrefix(a.Answer, "Yes, please downgrade") {
		t.Fatalf("approval %+v", a)
	}
	if d.Approved || d.Asked != "Shall I also cancel the travel insurance?" {
		t.Fatalf("refusal %+v", d)
	}
	state := strings.Join(ledger.Render(l, func(s string) int { return len(strings.Fields(s)) }, 1000).State, "\n")
	if !strings.Contains(state, `approved by the user: "The total refund is $327.`) && !strings.Contains(state, `approved by the user: "Would you like to proceed`) {
		t.Fatalf("state:\n%s", state)
	}
	if !strings.Contains(state, `declined by the user: "Shall I also cancel the travel insurance?"`) {
		t.Fatalf("state:\n%s", state)
	}
}

// A call with no result is in flight; a sub-agent whose result says it
// runs in the background stays running until a later range answers its
// call; the file last edited and the last command are the state's.
func TestInFlightAndSubAgents(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "user", Seq: 1, Text: "Port the module."},
		call("e1", "str_replace_editor", `{"command":"str_replace","path":"/repo/src/a.py","old_str":"x","new_str":"y"}`, 2),
		{Role: "tool", Seq: 3, ToolCallID: "e1", Text: "edited"},
		call("t1", "Task", `{"description":"Survey the callers of a.py","prompt":"Find every caller"}`, 4),
		{Role: "tool", Seq: 5, ToolCallID: "t1", Text: "Agent started in the background (id agent-7)."},
		call("b1", "bash", `{"command":"pytest -q tests/test_a.py"}`, 6),
		{Role: "tool", Seq: 7, ToolCallID: "b1", Text: "1 failed\n<returncode>1</returncode>"},
		call("b2", "bash", `{"command":"make lint"}`, 8),
	})
	if len(l.InFlight) != 2 || !l.InFlight[0].Agent || l.InFlight[0].What != "Survey the callers of a.py" || l.InFlight[1].Name != "bash" || l.InFlight[1].Agent {
		t.Fatalf("in flight %+v", l.InFlight)
	}
	if l.Editing != "/repo/src/a.py" {
		t.Fatalf("editing %q", l.Editing)
	}
	state := strings.Join(ledger.Render(l, func(s string) int { return len(strings.Fields(s)) }, 1000).State, "\n")
	for _, w := range []string{"sub-agent running: Task: Survey the callers of a.py (call t1)", "awaiting the result of bash: make lint (call b2)", "editing: /repo/src/a.py", "last command: `make lint`"} {
		if !strings.Contains(state, w) {
			t.Errorf("state lacks %q:\n%s", w, state)
		}
	}
	// The next range answers both calls: nothing in flight.
	next := ledger.Merge(l, ledger.Extract([]ledger.Message{
		{Role: "tool", Seq: 9, ToolCallID: "b2", Text: "ok"},
		{Role: "tool", Seq: 10, ToolCallID: "t1", Text: "The callers are b.py and c.py."},
	}))
	if len(next.InFlight) != 0 || next.Task != "Port the module." || next.Editing != "/repo/src/a.py" {
		t.Fatalf("after the results: in flight %+v, task %q, editing %q", next.InFlight, next.Task, next.Editing)
	}
}

// An instruction that replaces an earlier one says so, and the earlier
// one is shown with what superseded it.
func TestSupersededInstruction(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "user", Seq: 1, Text: "Always use tabs for indentation in the Go files."},
		{Role: "assistant", Seq: 2, Text: "Understood."},
		{Role: "user", Seq: 3, Text: "Please never push to the main branch."},
		{Role: "user", Seq: 4, Text: "Actually, use spaces for indentation in the Go files from now on."},
	})
	if len(l.Superseded) != 1 || l.Superseded[0].Old != "Always use tabs for indentation in the Go files." {
		t.Fatalf("superseded %+v (instructions %q)", l.Superseded, l.Instructions)
	}
	r := ledger.Render(l, func(s string) int { return len(strings.Fields(s)) }, 1000)
	joined := strings.Join(r.Instructions, "\n")
	if !strings.Contains(joined, `"Always use tabs for indentation in the Go files." (superseded by "Actually, use spaces for indentation in the Go files from now on.")`) ||
		!strings.Contains(joined, "Please never push to the main branch.\n") {
		t.Fatalf("instructions:\n%s", joined)
	}
}

// The state survives a small budget before the files only read do, and a
// budget too small for it renders nothing rather than a partial plan.
func TestStateWithinBudget(t *testing.T) {
	msgs := []ledger.Message{{Role: "user", Seq: 1, Text: strings.Repeat("The task is long. ", 200)}}
	for i := range 30 {
		msgs = append(msgs, call(string(rune('a'+i)), "read_file", `{"path":"src/file`+string(rune('a'+i))+`.go"}`, int64(2+2*i)),
			ledger.Message{Role: "tool", Seq: int64(3 + 2*i), ToolCallID: string(rune('a' + i)), Text: "package x"})
	}
	msgs = append(msgs, call("p", "TodoWrite", `{"todos":[{"content":"Read the sources","status":"completed"},{"content":"Write the port","status":"pending"}]}`, 90))
	l := ledger.Extract(msgs)
	count := func(s string) int { return len(strings.Fields(s)) }
	r := ledger.Render(l, count, 120)
	state := strings.Join(r.State, "\n")
	if !strings.Contains(state, "[done] Read the sources") || !strings.Contains(state, "[pending] Write the port") || len(l.Task) < 2000 || strings.Contains(state, strings.Repeat("The task is long. ", 30)) {
		t.Fatalf("state at 120:\n%s", state)
	}
}

// RenderWithState: the rest of the ledger renders as if there were no
// state (the identifiers and commands a small budget keeps stay), and the
// state takes its own budget and what the rest leaves.
func TestRenderWithStateApart(t *testing.T) {
	msgs := []ledger.Message{{Role: "user", Seq: 1, Text: "Rebook reservation ABC123 for the user. " + strings.Repeat("Details follow. ", 40)}}
	for i := range 12 {
		id := string(rune('a' + i))
		msgs = append(msgs, call(id, "update_reservation", `{"reservation_id":"R`+id+`X9","cabin":"economy"}`, int64(2+3*i)),
			ledger.Message{Role: "tool", Seq: int64(3 + 3*i), ToolCallID: id, Text: "ok"},
			ledger.Message{Role: "assistant", Seq: int64(4 + 3*i), Text: "Shall I go ahead with the next change?"},
			ledger.Message{Role: "user", Seq: int64(5 + 3*i), Text: "Yes, go ahead."})
	}
	l := ledger.Extract(msgs)
	count := func(s string) int { return len(strings.Fields(s)) }
	cp := *l
	cp.Task, cp.Plan, cp.Approvals, cp.InFlight, cp.Editing = "", nil, nil, nil, ""
	alone := ledger.Render(&cp, count, 60)
	r := ledger.RenderWithState(l, count, 60, 30)
	if strings.Join(r.Files, "\n") != strings.Join(alone.Files, "\n") || len(r.State) == 0 || r.Tokens > 90 {
		t.Fatalf("rest %q (alone %q), state %q, %d tokens", r.Files, alone.Files, r.State, r.Tokens)
	}
	if all := ledger.Render(l, count, 60); strings.Join(all.Files, "\n") == strings.Join(alone.Files, "\n") {
		t.Fatal("the state within the same budget should have cost the identifiers something")
	}
}
