package ledger_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/ledger"
)

func ops(l *ledger.Ledger, path string) []string {
	for _, f := range l.Files {
		if f.Path == path {
			return f.Ops
		}
	}
	return nil
}

func bash(id, cmd string, seq int64) ledger.Message {
	return ledger.Message{Role: "assistant", Seq: seq, ToolCalls: []ledger.Call{{ID: id, Name: "bash", Arguments: fmt.Sprintf(`{"command":%q}`, cmd)}}}
}

func result(id, text string, seq int64) ledger.Message {
	return ledger.Message{Role: "tool", ToolCallID: id, Text: text, Seq: seq}
}

// Shell commands: what each form does to the files it names.
func TestShellCommands(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		bash("1", `cat src/app.py | grep -n "def main" && sed -i 's/a/b/' src/util.py`, 1),
		bash("2", `echo "x" > notes.txt; touch new_module.go; rm -f old.c`, 2),
		bash("3", `cd /repo && mv a.txt b.txt && cp conf.yaml conf.yaml.bak`, 3),
		bash("4", `python -m pytest tests/test_app.py -k "not slow" 2>&1 | tee out.log`, 4),
		bash("5", `git checkout -- src/app.py && ls -la && pip install requests`, 5),
		bash("6", `echo more >> notes2.txt; printf 'y' > src/util.py`, 6),
	})
	for path, want := range map[string]string{
		"src/app.py": ledger.OpEdited, "src/util.py": ledger.OpEdited, "notes.txt": ledger.OpCreated, "new_module.go": ledger.OpCreated,
		"old.c": ledger.OpDeleted, "a.txt": ledger.OpDeleted, "b.txt": ledger.OpCreated, "conf.yaml": ledger.OpRead,
		"conf.yaml.bak": ledger.OpCreated, "tests/test_app.py": ledger.OpRead, "out.log": ledger.OpCreated, "notes2.txt": ledger.OpEdited,
	} {
		if got := ops(l, path); !slices.Contains(got, want) {
			t.Errorf("%s: ops %v, want %s", path, got, want)
		}
	}
	if got := ops(l, "src/app.py"); !slices.Contains(got, ledger.OpRead) {
		t.Errorf("src/app.py was read first: %v", got)
	}
	if got := ops(l, "src/util.py"); slices.Contains(got, ledger.OpCreated) {
		t.Errorf("src/util.py, edited before, was written over, not created: %v", got)
	}
	if len(l.Commands) != 6 || l.Commands[3].Cmd != `python -m pytest tests/test_app.py -k "not slow" 2>&1 | tee out.log` {
		t.Fatalf("commands %+v", l.Commands)
	}
	for _, bad := range []string{"-la", "requests", "/repo", "s/a/b/"} {
		if ops(l, bad) != nil {
			t.Errorf("%q is not a file", bad)
		}
	}
}

// A program's arguments name a file only by a file's extension or a
// directory: names in code ("seg.raw", "os.path") are not files, while a
// redirection's target is one whatever its extension.
func TestNamesInCodeAreNotFiles(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		bash("1", `grep -n "seg.raw" src/rules/L036.py && python -c "import os.path" && rg f.name lib/x.ts`, 1),
		bash("2", `grep sqlfluff.core.rules setup.cfg; echo 'actor Main' > test.pony && ponyc test.pony`, 2),
	})
	for _, want := range []string{"src/rules/L036.py", "lib/x.ts", "setup.cfg", "test.pony"} {
		if ops(l, want) == nil {
			t.Errorf("%s: not recorded (files %+v)", want, l.Files)
		}
	}
	for _, bad := range []string{"seg.raw", "f.name", "sqlfluff.core.rules", "os.path"} {
		if ops(l, bad) != nil {
			t.Errorf("%q is a name in code, not a file", bad)
		}
	}
}

// A here-document shows as its command and the file it writes, not its
// text: in the commands, the last command and an error's source.
func TestHeredocShownByItsTarget(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		bash("1", "cat <<'EOF' > reproduce.py\nimport sys\nprint(sys.argv)\nEOF\npython reproduce.py", 1),
		result("1", "Traceback (most recent call last):\n  File \"reproduce.py\", line 2\nNameError: name 'sys' is not defined", 2),
	})
	r := strings.Join(ledger.Render(l, func(s string) int { return len(s) / 4 }, 1000).All(), "\n")
	if !strings.Contains(r, "`cat <<'EOF' > reproduce.py`") || strings.Contains(r, "import sys") {
		t.Fatalf("rendered:\n%s", r)
	}
	if len(l.Errors) != 1 || l.Errors[0].From != "cat <<'EOF' > reproduce.py" {
		t.Fatalf("errors %+v", l.Errors)
	}
}

// An error, the edit after it, and the same command passing: the error is
// fixed by that edit. Exit codes and a test summary are read.
func TestErrorFixedByEdit(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		bash("1", "go test ./...", 1),
		result("1", "--- FAIL: TestParse (0.00s)\n    parse_test.go:12: got nil\nFAIL\tgithub.com/x/y\t0.01s\nexit status 1\n[The command completed with exit code 1.]", 2),
		{Role: "assistant", Seq: 3, ToolCalls: []ledger.Call{{ID: "2", Name: "str_replace_editor", Arguments: `{"command":"str_replace","path":"/repo/parse.go","old_str":"a","new_str":"b"}`}}},
		result("2", "The file /repo/parse.go has been edited.", 4),
		bash("3", "go test ./...", 5),
		result("3", "ok  \tgithub.com/x/y\t0.02s\n[The command completed with exit code 0.]", 6),
	})
	if len(l.Errors) == 0 || !strings.Contains(l.Errors[0].Error, "FAIL") || !strings.Contains(l.Errors[0].Fix, "/repo/parse.go") {
		t.Fatalf("errors %+v", l.Errors)
	}
	if c := l.Commands; len(c) != 2 || c[0].Exit == nil || *c[0].Exit != 1 || *c[1].Exit != 0 {
		t.Fatalf("commands %+v", c)
	}
	if len(l.Tests) != 2 || l.Tests[0].Outcome != "failed" || l.Tests[1].Outcome != "passed" {
		t.Fatalf("tests %+v", l.Tests)
	}
}

// Merge unites operations, keeps order and bounds; the inputs stay as
// they were.
func TestMerge(t *testing.T) {
	a := ledger.Extract([]ledger.Message{bash("1", "cat a.go", 1)})
	b := ledger.Extract([]ledger.Message{bash("2", "sed -i s/x/y/ a.go && cat https.go", 2)})
	m := ledger.Merge(a, b)
	if got := ops(m, "a.go"); !slices.Equal(got, []string{ledger.OpRead, ledger.OpEdited}) || len(m.Commands) != 2 {
		t.Fatalf("merged %+v", m)
	}
	if len(a.Files[0].Ops) != 1 || len(a.Commands) != 1 {
		t.Fatal("Merge changed its input")
	}
	var many []ledger.Message
	for i := range 600 {
		many = append(many, bash(fmt.Sprint(i), fmt.Sprintf("cat f%03d.go", i), int64(i+1)))
	}
	big := ledger.Extract(many)
	if len(big.Files) != 400 || big.Files[len(big.Files)-1].Path != "f599.go" || len(big.Commands) != 200 {
		t.Fatalf("bounds: %d files, last %s, %d commands", len(big.Files), big.Files[len(big.Files)-1].Path, len(big.Commands))
	}
}

// Render stays within its budget and cuts what matters least first: the
// files changed stay when the files only read go.
func TestRenderWithinBudget(t *testing.T) {
	var msgs []ledger.Message
	for i := range 60 {
		msgs = append(msgs, ledger.Message{Role: "assistant", Seq: int64(i), ToolCalls: []ledger.Call{{ID: fmt.Sprint(i), Name: "str_replace_editor",
			Arguments: fmt.Sprintf(`{"command":"view","path":"/work/project/src/pkg%d/file_%d.py"}`, i%5, i)}}})
	}
	msgs = append(msgs, ledger.Message{Role: "assistant", Seq: 99, ToolCalls: []ledger.Call{{ID: "e", Name: "str_replace_editor",
		Arguments: `{"command":"create","path":"/work/project/src/pkg1/new_feature.py"}`}}})
	l := ledger.Extract(msgs)
	count := func(s string) int { return len(strings.Fields(s)) + strings.Count(s, "/") + strings.Count(s, ",") } // a rough stand-in for a tokenizer
	cost := func(r ledger.Rendered) int {
		n := 0
		for _, b := range r.All() {
			n += count("- "+b+"\n") + 1
		}
		return n
	}
	full := ledger.Render(l, count, 10000)
	if !strings.Contains(strings.Join(full.Files, "\n"), "file_0.py") || !strings.Contains(full.Files[0], "workspace: /work/project/src/") {
		t.Fatalf("full rendering %q", full.Files)
	}
	for _, budget := range []int{400, 120, 40} {
		r := ledger.Render(l, count, budget)
		if c := cost(r); c > budget {
			t.Fatalf("budget %d: rendering costs %d", budget, c)
		}
		if !strings.Contains(strings.Join(r.All(), "\n"), "new_feature.py") {
			t.Fatalf("budget %d lost the created file: %q", budget, r.All())
		}
	}
	if r := ledger.Render(l, count, 5); len(r.All()) != 0 {
		t.Fatalf("a budget too small renders nothing, got %q", r.All())
	}
}

// SWE-agent's text actions: the command is the last fenced block, the
// next user message its observation; edit acts on the open file.
func TestTextActions(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "assistant", Seq: 1, Text: "Let's open it.\n```\nopen src/models.py\n```"},
		{Role: "user", Seq: 2, Text: "[File: /repo/src/models.py (300 lines total)]\n1:import os"},
		{Role: "assistant", Seq: 3, Text: "Fix the check.\n```\nedit 10:12\n    if x is None:\n        return\nend_of_edit\n```"},
		{Role: "user", Seq: 4, Text: "[File: /repo/src/models.py (301 lines total)]"},
		{Role: "assistant", Seq: 5, Text: "Run it.\n```\npython reproduce.py\n```"},
		{Role: "user", Seq: 6, Text: "Traceback (most recent call last):\n  File \"reproduce.py\", line 3\nNameError: name 'foo' is not defined"},
	})
	if got := ops(l, "/repo/src/models.py"); !slices.Contains(got, ledger.OpEdited) || !slices.Contains(got, ledger.OpRead) {
		t.Fatalf("files %+v", l.Files)
	}
	if len(l.Errors) != 1 || l.Errors[0].Error != "NameError: name 'foo' is not defined" || l.Errors[0].From != "python reproduce.py" {
		t.Fatalf("errors %+v", l.Errors)
	}
}

// mini-swe-agent 1.x: the action is the ```bash block, not an example in
// another language before it; its output (a user message) says nothing
// the user asked, even where it reads like an instruction.
func TestTextActionIsTheShellBlock(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "system", Seq: 1, Text: "You are a helpful assistant."},
		{Role: "user", Seq: 2, Text: "Fix the collector. When you are done, you MUST submit with `echo SUBMIT`."},
		{Role: "assistant", Seq: 3, Text: "THOUGHT: this line looks wrong:\n\n```python\npath + [\"__init__.py\"]\n```\n\nLet me look.\n\n```bash\ngrep -n collect src/main.py\n```"},
		{Role: "user", Seq: 4, Text: "<returncode>0</returncode>\n<output>\n12: raise TypeError(\"you should provide an instance of Foo\")\nPlease always pass a Foo to collect().\n</output>"},
	})
	if len(l.Commands) != 1 || l.Commands[0].Cmd != "grep -n collect src/main.py" {
		t.Fatalf("commands %+v", l.Commands)
	}
	if !slices.Equal(l.Instructions, []string{"When you are done, you MUST submit with `echo SUBMIT`."}) {
		t.Fatalf("instructions %q", l.Instructions)
	}
	if got := ledger.ShellBlock("```sh\nls\n```\ntext\n```python\nx = 1\n```"); got != "ls" {
		t.Fatalf("ShellBlock %q", got)
	}
}

// The user's instructions, verbatim, each once; none from a conversation
// between people, where advice is not an instruction to an agent.
func TestInstructions(t *testing.T) {
	l := ledger.Extract([]ledger.Message{
		{Role: "user", Text: "Fix the importer. Please keep the public API unchanged.\n1. Never push to main directly.\nDon't worry about the docs."},
		bash("1", "make", 2),
		{Role: "user", Text: "Please keep the public API unchanged."},
	})
	if !slices.Equal(l.Instructions, []string{"Please keep the public API unchanged.", "Never push to main directly."}) {
		t.Fatalf("instructions %q", l.Instructions)
	}
	r := ledger.Render(l, func(s string) int { return len(s) / 4 }, 1000)
	if !slices.Equal(r.Instructions, l.Instructions) {
		t.Fatalf("rendered %q", r.Instructions)
	}
	chat := ledger.Extract([]ledger.Message{
		{Role: "user", Name: "Caroline", Text: "Please always take care of yourself."},
		{Role: "assistant", Name: "Melanie", Text: "Thanks!"},
	})
	if len(chat.Instructions) != 0 {
		t.Fatalf("a conversation between people: %q", chat.Instructions)
	}
}

// What a user quotes in a fenced block (a crash log, an example) is not
// an instruction: the OpenHands ponyc issue quotes LLVM's "PLEASE submit a
// bug report ..." in its output, and the ledger kept it as the user's
// instruction, in the budget's way. A fence never closed hides nothing.
func TestQuotedBlocksAreNotInstructions(t *testing.T) {
	task := "Fix the crash. Please keep the fix small.\r\n**Actual Result:**\r\n```\r\n➜ ponyc\r\nPLEASE submit a bug report to https://github.com/llvm/llvm-project/issues/ and include the crash backtrace.\r\n```\r\n" +
		"~~~python\nNever call exit() here, it says.\n~~~\nMake sure all the tests pass."
	l := ledger.Extract([]ledger.Message{{Role: "user", Text: task}})
	if want := []string{"Please keep the fix small.", "Make sure all the tests pass."}; !slices.Equal(l.Instructions, want) {
		t.Fatalf("instructions %q, want %q", l.Instructions, want)
	}
	open := ledger.Extract([]ledger.Message{{Role: "user", Text: "Please never change the public API.\n```\nUse tabs for indentation in every file."}})
	if len(open.Instructions) != 2 {
		t.Fatalf("an unclosed fence hid instructions: %q", open.Instructions)
	}
}

// A session of read-only exploration that met a few errors, fixed since,
// with long lines (an editor's "old_str ... did not appear"): at a small
// budget the last commands stay, and the fixed errors show short. The
// commands' list went first, all of it, before: at 4k the OpenHands ponyc
// run kept none of its 11 commands behind three fixed errors.
func TestCommandsOutlastFixedErrors(t *testing.T) {
	l := &ledger.Ledger{}
	for i := range 20 {
		l.Commands = append(l.Commands, ledger.Command{Cmd: fmt.Sprintf("find src/pkg%d -name \"*parser*.pony\"", i), Seq: int64(i)})
	}
	for i := range 4 {
		l.Errors = append(l.Errors, ledger.Issue{Error: fmt.Sprintf("ERROR: No replacement was performed, old_str 'return CommandParser._sub(cs, this)._parse_command(tokens, options, args, envsmap, opt_stop) %d' did not appear verbatim", i),
			From: "str_replace_editor", Fix: "then `str_replace_editor` succeeded", Seq: int64(30 + i)})
	}
	count := func(s string) int { return len(s) / 4 }
	r := ledger.Render(l, count, 230)
	all := strings.Join(r.All(), "\n")
	if !strings.Contains(all, `find src/pkg19 -name "*parser*.pony"`) || !strings.Contains(all, `find src/pkg12 -name`) {
		t.Fatalf("the last eight commands are not kept:\n%s", all)
	}
	for _, b := range r.Errors {
		if strings.Contains(b, "did not appear verbatim") {
			t.Fatalf("a fixed error shows its whole line: %s", b)
		}
	}
}

// A cut between an agent's fenced command and its output (the assistant
// and user messages of mini-swe-agent): the message after the range is
// read as the action's output, so the action is recorded with what it
// did, and never read on its own. Before, the action was lost (the
// pytest run at 32k lost the file its here-document created).
func TestTextActionCutFromItsOutput(t *testing.T) {
	rng := []ledger.Message{
		{Role: "user", Seq: 1, Text: "Fix the collector."},
		{Role: "assistant", Seq: 2, Text: "THOUGHT: a script to check it.\n\n```bash\ncat <<'EOF' > check_dupes.sh\npytest tests tests\nEOF\n```"},
	}
	out := ledger.Message{Role: "user", Seq: 3, Text: "<returncode>1</returncode>\n<output>\nError: ModuleNotFoundError: No module named 'xmlschema'\nYou must always install it first.\n</output>", Lookahead: true}
	without := ledger.Extract(rng)
	if len(without.Commands) != 0 {
		t.Fatalf("without its output the action is %+v: the heuristic changed", without.Commands)
	}
	l := ledger.Extract(append(rng, out))
	if len(l.Commands) != 1 || !strings.Contains(l.Commands[0].Cmd, "check_dupes.sh") {
		t.Fatalf("commands %+v", l.Commands)
	}
	if !slices.ContainsFunc(l.Files, func(f ledger.File) bool { return f.Path == "check_dupes.sh" }) {
		t.Fatalf("files %+v", l.Files)
	}
	if len(l.Errors) != 1 || !strings.Contains(l.Errors[0].Error, "xmlschema") {
		t.Fatalf("the output's error: %+v", l.Errors)
	}
	if len(l.Instructions) != 0 {
		t.Fatalf("the output was read as the user's words: %q", l.Instructions)
	}
}

// The file tools of the common agent vocabularies: what each call does to
// the file it names, one session per call (a file not seen before).
func TestToolVocabularies(t *testing.T) {
	patch := "*** Begin Patch\n*** Add File: src/new.py\n+print(1)\n*** Update File: src/app.py\n@@\n-a\n+b\n*** Delete File: src/old.py\n*** End Patch"
	for _, tc := range []struct {
		vocab, name, args string
		want              map[string]string
	}{
		{"Claude Code", "Read", `{"file_path": "/repo/src/app.py"}`, map[string]string{"/repo/src/app.py": ledger.OpRead}},
		{"Claude Code", "Write", `{"file_path": "/repo/src/new.py", "content": "x = 1"}`, map[string]string{"/repo/src/new.py": ledger.OpCreated}},
		{"Claude Code", "Edit", `{"file_path": "/repo/src/app.py", "old_string": "a", "new_string": "b"}`, map[string]string{"/repo/src/app.py": ledger.OpEdited}},
		{"Claude Code", "MultiEdit", `{"file_path": "/repo/src/app.py", "edits": [{"old_string": "a", "new_string": "b"}]}`, map[string]string{"/repo/src/app.py": ledger.OpEdited}},
		{"Claude Code", "NotebookEdit", `{"notebook_path": "/repo/nb.ipynb", "new_source": "x"}`, map[string]string{"/repo/nb.ipynb": ledger.OpEdited}},
		{"Claude Code", "Glob", `{"pattern": "**/*.go", "path": "/repo/internal"}`, map[string]string{}},
		{"Claude Code", "Grep", `{"pattern": "func main", "path": "/repo/cmd"}`, map[string]string{}},
		{"Claude Code", "Bash", `{"command": "cat > /repo/run.sh <<'EOF'\nrm -rf build.log\npython x.py > out.txt\nEOF\nchmod +x /repo/run.sh"}`, map[string]string{"/repo/run.sh": ledger.OpCreated}},
		{"OpenHands", "str_replace_editor", `{"command": "create", "path": "/workspace/a.py", "file_text": "x"}`, map[string]string{"/workspace/a.py": ledger.OpCreated}},
		{"OpenHands", "str_replace_editor", `{"command": "str_replace", "path": "/workspace/a.py", "old_str": "x", "new_str": "y"}`, map[string]string{"/workspace/a.py": ledger.OpEdited}},
		{"OpenHands", "str_replace_editor", `{"command": "view", "path": "/workspace/a.py"}`, map[string]string{"/workspace/a.py": ledger.OpRead}},
		{"OpenHands", "file_editor", `{"command": "insert", "path": "/workspace/a.py", "insert_line": 3, "new_str": "y"}`, map[string]string{"/workspace/a.py": ledger.OpEdited}},
		{"OpenHands", "execute_bash", `{"command": "sed -i 's/a/b/' /workspace/a.py"}`, map[string]string{"/workspace/a.py": ledger.OpEdited}},
		{"mini-swe-agent", "bash", `{"command": "cat <<'EOF' > /testbed/repro.py\nimport os\nprint(open('data.csv').read())\nEOF\npython /testbed/repro.py"}`, map[string]string{"/testbed/repro.py": ledger.OpCreated + "," + ledger.OpRead}},
		{"mini-swe-agent", "bash", `{"command": "nl -ba /testbed/src/mod.py | sed -n '10,40p'"}`, map[string]string{"/testbed/src/mod.py": ledger.OpRead}},
		{"Codex", "apply_patch", `{"input": ` + jsonString(patch) + `}`, map[string]string{"src/new.py": ledger.OpCreated, "src/app.py": ledger.OpEdited, "src/old.py": ledger.OpDeleted}},
		{"Codex", "shell", `{"command": ["apply_patch", ` + jsonString(patch) + `]}`, map[string]string{"src/new.py": ledger.OpCreated, "src/app.py": ledger.OpEdited, "src/old.py": ledger.OpDeleted}},
		{"Codex", "shell", `{"command": ["bash", "-lc", "apply_patch <<'PATCH'\n` + strings.ReplaceAll(patch, "\n", `\n`) + `\nPATCH"]}`, map[string]string{"src/new.py": ledger.OpCreated, "src/app.py": ledger.OpEdited, "src/old.py": ledger.OpDeleted}},
		{"Codex", "shell", `{"command": ["bash", "-lc", "rg -n foo src && cat src/app.py"], "workdir": "/repo"}`, map[string]string{"src/app.py": ledger.OpRead}},
		{"opencode", "write", `{"filePath": "/p/src/index.ts", "content": "x"}`, map[string]string{"/p/src/index.ts": ledger.OpCreated}},
		{"opencode", "edit", `{"filePath": "/p/src/index.ts", "oldString": "a", "newString": "b"}`, map[string]string{"/p/src/index.ts": ledger.OpEdited}},
		{"opencode", "read", `{"filePath": "/p/README.md"}`, map[string]string{"/p/README.md": ledger.OpRead}},
		{"pi", "edit", `{"path": "src/main.rs", "oldText": "a", "newText": "b"}`, map[string]string{"src/main.rs": ledger.OpEdited}},
		{"Gemini CLI", "write_file", `{"file_path": "/w/app.js", "content": "x"}`, map[string]string{"/w/app.js": ledger.OpCreated}},
		{"Gemini CLI", "replace", `{"file_path": "/w/app.js", "old_string": "a", "new_string": "b"}`, map[string]string{"/w/app.js": ledger.OpEdited}},
		{"Gemini CLI", "read_file", `{"absolute_path": "/w/app.js"}`, map[string]string{"/w/app.js": ledger.OpRead}},
		{"Gemini CLI", "read_many_files", `{"paths": ["/w/a.md", "/w/b.md"]}`, map[string]string{"/w/a.md": ledger.OpRead, "/w/b.md": ledger.OpRead}},
		{"Cline", "write_to_file", `{"path": "src/a.ts", "content": "x"}`, map[string]string{"src/a.ts": ledger.OpCreated}},
		{"Cline", "replace_in_file", `{"path": "src/a.ts", "diff": "x"}`, map[string]string{"src/a.ts": ledger.OpEdited}},
		{"Cursor", "edit_file", `{"target_file": "src/a.ts", "code_edit": "x"}`, map[string]string{"src/a.ts": ledger.OpEdited}},
		{"MCP", "mcp__filesystem__write_file", `{"path": "/data/report.csv", "content": "x"}`, map[string]string{"/data/report.csv": ledger.OpCreated}},
	} {
		l := ledger.Extract([]ledger.Message{{Role: "assistant", Seq: 1, ToolCalls: []ledger.Call{{ID: "c1", Name: tc.name, Arguments: tc.args}}}})
		got := map[string]string{}
		for _, f := range l.Files {
			got[f.Path] = strings.Join(f.Ops, ",")
		}
		for path, want := range tc.want {
			if got[path] != want {
				t.Errorf("%s %s: %s is %q, want %q (all: %v)", tc.vocab, tc.name, path, got[path], want, got)
			}
		}
		for path := range got {
			if _, ok := tc.want[path]; !ok {
				t.Errorf("%s %s: %s (%s) is no file the call touched", tc.vocab, tc.name, path, got[path])
			}
		}
	}
	// A whole file written over one the session read is edited, not created.
	l := ledger.Extract([]ledger.Message{
		{Role: "assistant", Seq: 1, ToolCalls: []ledger.Call{{ID: "c1", Name: "Read", Arguments: `{"file_path": "/repo/a.py"}`}}},
		{Role: "assistant", Seq: 2, ToolCalls: []ledger.Call{{ID: "c2", Name: "Write", Arguments: `{"file_path": "/repo/a.py", "content": "x"}`}}},
	})
	if got := ops(l, "/repo/a.py"); !slices.Equal(got, []string{ledger.OpRead, ledger.OpEdited}) {
		t.Errorf("a file read then written: %v, want read then edited", got)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
