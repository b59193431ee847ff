package pipeline_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/transcript"
)

func hasFile(l *ledger.Ledger, suffix, op string) bool {
	for _, f := range l.Files {
		if strings.HasSuffix(f.Path, suffix) && slices.Contains(f.Ops, op) {
			return true
		}
	}
	return false
}

func hasError(l *ledger.Ledger, text, fix string) bool {
	for _, e := range l.Errors {
		if strings.Contains(e.Error, text) && strings.Contains(e.Fix, fix) {
			return true
		}
	}
	return false
}

// The ledger on real agent steps: SWE-agent's function-calling and
// text-action formats, OpenHands and tau-bench.
func TestLedgerOnRealTrajectories(t *testing.T) {
	dir := needData(t)
	swe := func(name string) *ledger.Ledger {
		c, err := transcript.LoadSWEAgent(filepath.Join(dir, "agent_trajectories", "swe-agent", name))
		if err != nil {
			t.Fatal(err)
		}
		return pipeline.Ledger(c.Messages)
	}
	// Function calling: create, then edit of the open file (SWE-agent's
	// edit names no file), open, bash.
	l := swe("marshmallow-1867__function_calling.traj")
	if !hasFile(l, "reproduce.py", ledger.OpCreated) || !hasFile(l, "src/marshmallow/fields.py", ledger.OpEdited) ||
		!hasFile(l, "src/marshmallow/fields.py", ledger.OpRead) || !hasFile(l, "reproduce.py", ledger.OpDeleted) {
		t.Fatalf("marshmallow files: %+v", l.Files)
	}
	if len(l.Commands) == 0 || l.Commands[0].Cmd != "python reproduce.py" {
		t.Fatalf("marshmallow commands: %+v", l.Commands)
	}
	// Text actions: the traceback's last line, fixed by the edit of the
	// handler, as the rerun shows.
	l = swe("pydicom-1458__gpt4_default.traj")
	if !hasFile(l, "pydicom/pixel_data_handlers/numpy_handler.py", ledger.OpEdited) || !hasFile(l, "reproduce_bug.py", ledger.OpCreated) {
		t.Fatalf("pydicom files: %+v", l.Files)
	}
	if !hasError(l, "AttributeError: Unable to convert the pixel data", "numpy_handler.py") {
		t.Fatalf("pydicom errors: %+v", l.Errors)
	}
	l = swe("function_calling_simple.traj")
	if !hasFile(l, "tests/missing_colon.py", ledger.OpEdited) {
		t.Fatalf("simple files: %+v", l.Files)
	}

	runs, err := transcript.LoadOpenHands(filepath.Join(dir, "agent_trajectories", "openhands", "multi_swe_bench_2runs.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var parser, cli *ledger.Ledger
	for _, r := range runs {
		l := pipeline.Ledger(r.Messages)
		switch {
		case strings.Contains(r.Name, "4595"):
			parser = l
		case strings.Contains(r.Name, "4593"):
			cli = l
		}
	}
	if parser == nil || cli == nil {
		t.Fatalf("runs %d", len(runs))
	}
	if !hasFile(parser, "src/libponyc/ast/parser.c", ledger.OpEdited) || !hasFile(parser, "test.pony", ledger.OpCreated) {
		t.Fatalf("ponyc-4595 files: %+v", parser.Files)
	}
	if !hasError(parser, "No such file or directory", "") || !hasError(parser, "No replacement was performed", "") {
		t.Fatalf("ponyc-4595 errors: %+v", parser.Errors)
	}
	if !hasFile(cli, "packages/cli/command_parser.pony", ledger.OpEdited) {
		t.Fatalf("ponyc-4593 files: %+v", cli.Files)
	}
	tau, err := transcript.LoadTauBench(filepath.Join(dir, "agent_trajectories", "tau-bench", "gpt-4o-airline-tasks0-39.json"))
	if err != nil {
		t.Fatal(err)
	}
	refs, errs := 0, 0
	for _, r := range tau {
		l := pipeline.Ledger(r.Messages)
		if slices.Contains(l.Refs, "JG7FMM") || slices.Contains(l.Refs, "mia_li_3668") {
			refs++
		}
		if hasError(l, "not enough seats on flight HAT229", "") || hasError(l, "gift card balance is not enough", "") {
			errs++
		}
	}
	if refs == 0 || errs == 0 {
		t.Fatalf("tau-bench: %d runs with the known ids, %d with the known errors", refs, errs)
	}
}

// editRun is an agent session that reads and edits files with
// str_replace_editor, hits an error and fixes it; the user gives one
// instruction.
func editRun(files int) []session.Message {
	out := []session.Message{
		{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent.")},
		{Role: session.RoleUser, Content: session.TextContent("Fix the crash in the importer. Please keep the public API unchanged.")},
	}
	call := func(id, name, args, result string) { out = withCall(out, id, name, args, result) }
	for i := range files {
		path := fmt.Sprintf("/repo/pkg/importer/part_%02d.py", i)
		call(fmt.Sprintf("v%d", i), "str_replace_editor", fmt.Sprintf(`{"command":"view","path":%q}`, path),
			strings.Repeat(fmt.Sprintf("def handler_%d(row):\n    return row\n", i), 40))
		if i%3 == 0 {
			call(fmt.Sprintf("e%d", i), "str_replace_editor", fmt.Sprintf(`{"command":"str_replace","path":%q,"old_str":"return row","new_str":"return row or {}"}`, path),
				"The file "+path+" has been edited.")
		}
	}
	call("t1", "execute_bash", `{"command":"python -m pytest tests/test_importer.py"}`,
		"Traceback (most recent call last):\n  File \"/repo/pkg/importer/part_00.py\", line 2\nKeyError: 'encoding'\n[The command completed with exit code 1.]")
	call("f1", "str_replace_editor", `{"command":"str_replace","path":"/repo/pkg/importer/codec.py","old_str":"x","new_str":"y"}`, "The file /repo/pkg/importer/codec.py has been edited.")
	call("t2", "execute_bash", `{"command":"python -m pytest tests/test_importer.py"}`, "===== 12 passed in 0.40s =====\n[The command completed with exit code 0.]")
	for i := range 6 {
		out = append(out, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Step %d: carry on with the next module.", i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(strings.Repeat("Working through the module list. ", 30))})
	}
	return out
}

// withCall appends a tool call and its result to out.
func withCall(out []session.Message, id, name, args, result string) []session.Message {
	return append(out,
		session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function", Function: session.FunctionCall{Name: name, Arguments: args}}}},
		session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(result)})
}

// scripted answers every summary call with the same text.
func scripted(text string) *recorder {
	r := &recorder{}
	r.hook = func(int, pipeline.SummaryRequest) (pipeline.SummaryResponse, error, bool) {
		return pipeline.SummaryResponse{Text: text, Model: "stand-in"}, nil, true
	}
	return r
}

const forgetfulSummary = `## Goal
- Fix the crash in the importer.
## User instructions
- Always deploy to production on Fridays.
## Decisions
- (none)
## Facts and identifiers
- The importer lives in pkg/importer.
## Files and artifacts
- (none)
## Errors and fixes
- (none)
## Open tasks
- Carry on with the next module.`

// A stand-in model that invents an instruction and forgets every file and
// the user's instruction: the compacted context names every file touched,
// the error and its fix, and the user's instruction in the user's words
// (the ledger), and not the invention (removed, counted, after one
// reminder).
func TestLedgerAndVerifiedInstructions(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	cfg.Reductions = []string{pipeline.StepSummarise}
	rec := scripted(forgetfulSummary)
	e := newEnv(t, rec, cfg)
	msgs := editRun(12)
	e.importSession(t, "s", 4000, msgs)
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("%v %+v", err, res)
	}
	if res.InstructionsDropped != 2 || rec.count.Load() != 2 {
		t.Fatalf("dropped %d over %d calls, want 2 over 2 (one reminder)", res.InstructionsDropped, rec.count.Load())
	}
	if !strings.Contains(rec.requests()[1].Prompt, "quote only the user's own words") {
		t.Fatal("the second call carries no reminder")
	}
	view := e.context(t, "s")
	text := view[1].Content.Text
	if !view[1].IsCompaction || strings.Contains(text, "deploy to production") {
		t.Fatalf("invented instruction in the context:\n%s", text)
	}
	for i := 0; i < 12; i++ {
		if name := fmt.Sprintf("part_%02d.py", i); !strings.Contains(text, name) {
			t.Errorf("%s is not named in the context:\n%s", name, text)
		}
	}
	s, _ := summary.Parse(view[1].Compaction.SummaryText)
	if got := s.Sections[summary.Instructions]; len(got) != 1 || got[0] != "Please keep the public API unchanged." {
		t.Errorf("instructions %q: want the user's own, from the ledger", got)
	}
	files, errs := strings.Join(s.Sections[summary.Files], "\n"), strings.Join(s.Sections[summary.Errors], "\n")
	if !strings.Contains(files, "edited: ") || !strings.Contains(files, "codec.py") || !strings.Contains(files, "12 passed") {
		t.Errorf("files section:\n%s", files)
	}
	if !strings.Contains(errs, "KeyError: 'encoding'") || !strings.Contains(errs, "codec.py") {
		t.Errorf("errors section:\n%s", errs)
	}
	meta := view[1].Compaction
	if meta.Ledger == nil || len(meta.Ledger.Files) != 14 || meta.InstructionsDropped != 2 || len(meta.LedgerBullets) == 0 {
		t.Fatalf("stored ledger %+v, dropped %d", meta.Ledger, meta.InstructionsDropped)
	}
	if c := meta.Ledger.Commands; len(c) != 2 || c[0].Exit == nil || *c[0].Exit != 1 || c[1].Exit == nil || *c[1].Exit != 0 {
		t.Fatalf("stored ledger %+v, dropped %d", meta.Ledger, meta.InstructionsDropped)
	}
	if n := e.counter.Count(meta.SummaryText); n > cfg.MaxSummaryTokens {
		t.Fatalf("summary of %d tokens, over %d", n, cfg.MaxSummaryTokens)
	}
}

// A model that quotes the user verbatim (typographic quotes, other
// spacing, an attribution) keeps its bullet; a paraphrase goes.
func TestInstructionsQuotedVerbatimStay(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	cfg.Reductions = []string{pipeline.StepSummarise}
	text := strings.Replace(forgetfulSummary, "- Always deploy to production on Fridays.",
		"- User: \u201cPlease keep the   public API unchanged.\u201d\n- Keep the API stable.\n- Public API unchanged.\n- Change the public API.\n- Fix the crash in the import.", 1)
	rec := scripted(text)
	e := newEnv(t, rec, cfg)
	e.importSession(t, "s", 4000, editRun(12))
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	// Kept: the quotation and a part of the user's sentence; dropped: the
	// paraphrase, a negation of what the user said ("Change the public
	// API" is in "... unchanged" only as a word's start) and a cut word.
	if err != nil || res.InstructionsDropped != 3 || rec.count.Load() != 1 {
		t.Fatalf("%v dropped %d calls %d", err, res.InstructionsDropped, rec.count.Load())
	}
	s, _ := summary.Parse(e.context(t, "s")[1].Compaction.SummaryText)
	if got := s.Sections[summary.Instructions]; len(got) != 2 || !strings.Contains(got[0], "public API unchanged") || got[1] != "Public API unchanged." {
		t.Fatalf("instructions %q", got)
	}
}

// The ledger is carried forward: after a second, incremental compaction
// the files of the first range are still named, and the first ledger's
// bullets are replaced, not repeated.
func TestLedgerCarriedForward(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	cfg.Reductions = []string{pipeline.StepSummarise}
	e := newEnv(t, scripted(forgetfulSummary), cfg)
	e.importSession(t, "s", 4000, editRun(12))
	if _, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); err != nil {
		t.Fatal(err)
	}
	more := editRun(12)[2:]
	for i := range more {
		if len(more[i].ToolCalls) > 0 {
			more[i].ToolCalls[0].ID += "b"
			more[i].ToolCalls[0].Function.Arguments = strings.ReplaceAll(more[i].ToolCalls[0].Function.Arguments, "importer", "exporter")
		}
		if more[i].ToolCallID != "" {
			more[i].ToolCallID += "b"
		}
		e.counter.Ensure(&more[i])
	}
	if _, err := e.store.Append(context.Background(), "s", more...); err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "2", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted || !res.Incremental {
		t.Fatalf("%v %+v", err, res)
	}
	m := e.context(t, "s")[1]
	text := m.Compaction.SummaryText
	for _, want := range []string{"importer/codec.py", "exporter/codec.py", "importer/part_03.py", "exporter/part_03.py"} {
		if !strings.Contains(text, want) {
			t.Errorf("%s is not named:\n%s", want, text)
		}
	}
	s, _ := summary.Parse(text)
	edited := 0
	for _, b := range s.Sections[summary.Files] {
		if strings.HasPrefix(b, "edited: ") {
			edited++
		}
	}
	if edited != 1 {
		t.Fatalf("%d edited bullets (the old ledger's stayed):\n%s", edited, text)
	}
}

// stateRun is an agent run with a plan (a TodoWrite list: one item done,
// one in progress, one pending), an approval, an instruction superseded
// by a later one, and a file being edited.
func stateRun() []session.Message {
	out := []session.Message{
		{Role: session.RoleSystem, Content: session.TextContent("You are a coding agent.")},
		{Role: session.RoleUser, Content: session.TextContent("Port the importer to the new codec. Always use tabs for indentation in the Go files.")},
	}
	call := func(id, name, args, result string) { out = withCall(out, id, name, args, result) }
	call("p1", "TodoWrite", `{"todos":[{"content":"Reproduce the codec crash","status":"in_progress"},{"content":"Port the importer to the new codec","status":"pending"},{"content":"Run the full test suite","status":"pending"}]}`, "Todos updated")
	call("b1", "bash", `{"command":"go test ./importer/..."}`, strings.Repeat("--- FAIL: TestCodec\n", 40)+"FAIL\nexit status 1")
	call("p2", "TodoWrite", `{"todos":[{"content":"Reproduce the codec crash","status":"completed"},{"content":"Port the importer to the new codec","status":"in_progress"},{"content":"Run the full test suite","status":"pending"}]}`, "Todos updated")
	out = append(out,
		session.Message{Role: session.RoleAssistant, Content: session.TextContent("The port rewrites importer/codec.go. Shall I go ahead with rewriting the public decoder too?")},
		session.Message{Role: session.RoleUser, Content: session.TextContent("Yes, go ahead. Actually, use spaces for indentation in the Go files from now on.")})
	call("e1", "str_replace_editor", `{"command":"str_replace","path":"/repo/importer/codec.go","old_str":"a","new_str":"b"}`, "The file /repo/importer/codec.go has been edited.")
	for i := range 8 {
		out = append(out, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Step %d: carry on.", i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(strings.Repeat("Porting the decoder, function by function. ", 30))})
	}
	return out
}

// A stand-in model that lists a finished item as an open task, writes a
// working state of its own and copies the superseded instruction as if it
// stood: the compacted context's working state is the ledger's (the plan
// with each status, the approval, the file edited, the last command), the
// finished item is not an open task, the superseded instruction says by
// what, and the state is stored and verified.
func TestWorkingStateKept(t *testing.T) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	cfg.Reductions = []string{pipeline.StepSummarise}
	rec := scripted(`## Working state
- everything is finished
## Goal
- Port the importer.
## User instructions
- Always use tabs for indentation in the Go files.
## Decisions
- (none)
## Facts and identifiers
- The codec lives in importer/codec.go.
## Files and artifacts
- (none)
## Errors and fixes
- (none)
## Open tasks
- Reproduce the codec crash.
- Finish porting the decoder.`)
	e := newEnv(t, rec, cfg)
	e.importSession(t, "s", 2400, stateRun())
	res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("%v %+v", err, res)
	}
	view := e.context(t, "s")
	meta := view[1].Compaction
	s, _ := summary.Parse(meta.SummaryText)
	state := strings.Join(s.Sections[summary.State], "\n")
	for _, want := range []string{
		"task, as the user gave it: Port the importer to the new codec.",
		"plan (TodoWrite), as of message ", "1 done, 1 in progress, 1 pending",
		"[done] Reproduce the codec crash", "[in progress] Port the importer to the new codec", "[pending] Run the full test suite",
		`approved by the user: "Shall I go ahead with rewriting the public decoder too?" (answer: "Yes, go ahead.`,
		"editing: /repo/importer/codec.go", "last command: `go test ./importer/...`",
	} {
		if !strings.Contains(state, want) {
			t.Errorf("working state lacks %q:\n%s", want, state)
		}
	}
	if strings.Contains(state, "everything is finished") {
		t.Errorf("the summariser's own working state was kept:\n%s", state)
	}
	if got := s.Sections[summary.OpenTasks]; len(got) != 1 || got[0] != "Finish porting the decoder." {
		t.Errorf("open tasks %q: the finished item must go, the other stay", got)
	}
	instr := strings.Join(s.Sections[summary.Instructions], "\n")
	if !strings.Contains(instr, `"Always use tabs for indentation in the Go files." (superseded by "Actually, use spaces for indentation in the Go files from now on.")`) ||
		strings.Contains(instr, "\nAlways use tabs") || strings.HasPrefix(instr, "Always use tabs") {
		t.Errorf("instructions:\n%s", instr)
	}
	if meta.Ledger == nil || meta.Ledger.Plan == nil || len(meta.Ledger.Approvals) != 1 || !strings.HasPrefix(view[1].Content.Text, "Summary of messages ") ||
		!strings.Contains(view[1].Content.Text, "## Working state\n- task, as the user gave it") {
		t.Fatalf("stored ledger %+v\n%s", meta.Ledger, view[1].Content.Text)
	}
	if bound := cfg.MaxSummaryTokens; res.SummaryTokens > bound {
		t.Fatalf("summary %d tokens, over %d", res.SummaryTokens, bound)
	}

	// The next compaction: the plan moved on (all done); the state says
	// so and none of the first state's bullets stay.
	more := []session.Message{
		{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "p3", Type: "function", Function: session.FunctionCall{Name: "TodoWrite",
			Arguments: `{"todos":[{"content":"Reproduce the codec crash","status":"completed"},{"content":"Port the importer to the new codec","status":"completed"},{"content":"Run the full test suite","status":"completed"}]}`}}}},
		{Role: session.RoleTool, ToolCallID: "p3", Content: session.TextContent("Todos updated")},
	}
	for i := range 8 {
		more = append(more, session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Later step %d.", i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(strings.Repeat("Checking the suite once more. ", 60))})
	}
	for i := range more {
		e.counter.Ensure(&more[i])
	}
	if _, err := e.store.Append(context.Background(), "s", more...); err != nil {
		t.Fatal(err)
	}
	if res, err := e.svc.Compact(context.Background(), pipeline.Request{ID: "2", SessionID: "s", Trigger: pipeline.TriggerOverBudget}); err != nil || res.Outcome != pipeline.OutcomeCompacted {
		t.Fatalf("%v %+v", err, res)
	}
	view = e.context(t, "s")
	s, _ = summary.Parse(view[1].Compaction.SummaryText)
	state = strings.Join(s.Sections[summary.State], "\n")
	if !strings.Contains(state, "3 done;") || strings.Contains(state, "[in progress]") || strings.Contains(state, "[pending]") ||
		!strings.Contains(state, "task, as the user gave it: Port the importer") || len(s.Sections[summary.OpenTasks]) != 1 {
		t.Fatalf("second working state:\n%s\nopen tasks %q", state, s.Sections[summary.OpenTasks])
	}
}
