// Package ledger is the artifact ledger: what an agent did to its
// workspace, extracted deterministically from a session's messages — files
// read, created, edited and deleted, commands with their exit status,
// errors and what fixed them, test outcomes, URLs and identifiers. A
// compaction stores it in its metadata and renders it into the summary's
// "Files and artifacts" and "Errors and fixes" sections, so that no
// summariser, model or offline, has to remember it.
//
// It reads the tool calls of common agent tools (shell commands; editors
// such as str_replace_editor, SWE-agent's open/create/edit; any path or file
// argument) and their results (file headers, exit codes, tracebacks, test
// summaries), in the OpenAI chat format and in SWE-agent's text-action
// format (a fenced command answered by a user message).
package ledger

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// File operations, in the order a rendering lists them.
const (
	OpCreated = "created"
	OpEdited  = "edited"
	OpDeleted = "deleted"
	OpRead    = "read"
)

var opOrder = []string{OpEdited, OpCreated, OpDeleted, OpRead}

// Bounds of what one ledger keeps (the rendering is bounded separately, by
// tokens): the oldest entries go first.
const (
	maxFiles    = 400
	maxCommands = 200
	maxErrors   = 40
	maxTests    = 20
	maxRefs     = 60
	maxAttach   = 40
	maxInstr    = 30
	maxText     = 140 // characters of a command or an error kept
)

// Ledger is what a range of a session did. The zero value is empty.
type Ledger struct {
	Files    []File    `json:"files,omitempty"`
	Commands []Command `json:"commands,omitempty"`
	Errors   []Issue   `json:"errors,omitempty"`
	Tests    []Test    `json:"tests,omitempty"`
	// Refs are URLs and identifiers the agent's tool calls named
	// (reservation ids, ticket numbers, commit hashes).
	Refs []string `json:"refs,omitempty"`
	// Attachments are the images and files the messages carried, as
	// their placeholders.
	Attachments []Attachment `json:"attachments,omitempty"`
	// Instructions are the user's standing instructions, verbatim
	// (IsInstruction), each once; Superseded, those a later one replaced.
	Instructions []string       `json:"instructions,omitempty"`
	Superseded   []Supersession `json:"superseded,omitempty"`

	// The working state where the range ends (state.go).
	//
	// Task is the opening of the session's first user message.
	Task string `json:"task,omitempty"`
	// Plan is the agent's plan as last written, with each item's status.
	Plan *Plan `json:"plan,omitempty"`
	// Approvals are the questions asking leave to act that the user
	// answered, and how.
	Approvals []Approval `json:"approvals,omitempty"`
	// InFlight are tool calls with no result yet and sub-agents still
	// running.
	InFlight []Pending `json:"in_flight,omitempty"`
	// Editing is the file the agent last edited or created.
	Editing string `json:"editing,omitempty"`

	// answered are the tool calls whose results the range holds (for
	// Merge: they take an earlier range's calls off InFlight).
	answered map[string]bool
}

// Attachment is an image or file a message carried.
type Attachment struct {
	Placeholder string `json:"placeholder"`
	Role        string `json:"role"`
	Seq         int64  `json:"seq,omitempty"`
}

// File is one path and what was done to it.
type File struct {
	Path string   `json:"path"`
	Ops  []string `json:"ops"`
	Seq  int64    `json:"last_seq,omitempty"`
}

// Command is one shell command the agent ran.
type Command struct {
	Cmd  string `json:"cmd"`
	Exit *int   `json:"exit,omitempty"`
	Seq  int64  `json:"seq,omitempty"`
}

// Issue is an error a tool reported, and what fixed it, when something did.
type Issue struct {
	Error string `json:"error"`
	From  string `json:"from,omitempty"` // the command or tool that reported it
	Fix   string `json:"fix,omitempty"`
	Seq   int64  `json:"seq,omitempty"`
}

// Test is one test run's outcome.
type Test struct {
	Cmd     string `json:"cmd,omitempty"`
	Outcome string `json:"outcome"` // "passed" or "failed"
	Detail  string `json:"detail,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
}

// Empty reports whether the ledger records nothing.
func (l *Ledger) Empty() bool {
	return l == nil || len(l.Files)+len(l.Commands)+len(l.Errors)+len(l.Tests)+len(l.Refs)+len(l.Attachments)+len(l.Instructions)+
		len(l.Approvals)+len(l.InFlight) == 0 && l.Task == "" && l.Plan == nil
}

// Clone returns a deep copy (nil for nil).
func (l *Ledger) Clone() *Ledger {
	if l == nil {
		return nil
	}
	out := &Ledger{Files: make([]File, len(l.Files)), Commands: slices.Clone(l.Commands), Errors: slices.Clone(l.Errors),
		Tests: slices.Clone(l.Tests), Refs: slices.Clone(l.Refs), Attachments: slices.Clone(l.Attachments),
		Instructions: slices.Clone(l.Instructions), Superseded: slices.Clone(l.Superseded), Task: l.Task,
		Approvals: slices.Clone(l.Approvals), InFlight: slices.Clone(l.InFlight), Editing: l.Editing}
	if l.Plan != nil {
		p := *l.Plan
		p.Items = slices.Clone(p.Items)
		out.Plan = &p
	}
	for i, f := range l.Files {
		out.Files[i] = File{Path: f.Path, Ops: slices.Clone(f.Ops), Seq: f.Seq}
	}
	return out
}

// Merge returns the ledger of prev followed by next: files' operations
// united, lists appended, errors fixed later marked fixed; bounded, oldest
// entries first to go. The inputs are not changed.
func Merge(prev, next *Ledger) *Ledger {
	out := prev.Clone()
	if out == nil {
		out = &Ledger{}
	}
	if next == nil {
		return out
	}
	for _, f := range next.Files {
		for _, op := range f.Ops {
			out.file(f.Path, op, f.Seq)
		}
	}
	out.Commands = append(out.Commands, next.Commands...)
	for _, e := range next.Errors {
		out.addError(e)
	}
	out.Tests = append(out.Tests, next.Tests...)
	for _, r := range next.Refs {
		out.ref(r)
	}
	out.Attachments = append(out.Attachments, next.Attachments...)
	for _, in := range next.Instructions {
		out.instruction(in)
	}
	for _, sup := range next.Superseded {
		if !slices.Contains(out.Superseded, sup) {
			out.Superseded = append(out.Superseded, sup)
		}
	}
	if out.Task == "" {
		out.Task = next.Task
	}
	if next.Plan != nil {
		p := *next.Plan
		p.Items = slices.Clone(p.Items)
		out.setPlan(&p)
	}
	out.Approvals = append(out.Approvals, next.Approvals...)
	out.InFlight = append(resolve(out.InFlight, next.answered), next.InFlight...)
	if next.Editing != "" {
		out.Editing = next.Editing
	}
	out.bound()
	return out
}

func (l *Ledger) bound() {
	if n := len(l.Files) - maxFiles; n > 0 {
		// The files touched longest ago go first.
		slices.SortStableFunc(l.Files, func(a, b File) int { return int(a.Seq - b.Seq) })
		l.Files = slices.Clone(l.Files[n:])
	}
	l.Commands = lastN(l.Commands, maxCommands)
	l.Errors = lastN(l.Errors, maxErrors)
	l.Tests = lastN(l.Tests, maxTests)
	l.Refs = lastN(l.Refs, maxRefs)
	l.Attachments = lastN(l.Attachments, maxAttach)
	l.Instructions = lastN(l.Instructions, maxInstr)
	var sup []Supersession
	for _, x := range l.Superseded {
		if slices.Contains(l.Instructions, x.Old) {
			sup = append(sup, x)
		}
	}
	l.Superseded = sup
	l.Approvals = lastN(l.Approvals, maxApprovals)
	l.InFlight = lastN(l.InFlight, maxInFlight)
}

func (l *Ledger) instruction(s string) {
	if !slices.Contains(l.Instructions, s) {
		l.supersede(s)
		l.Instructions = append(l.Instructions, s)
	}
}

func lastN[T any](s []T, n int) []T {
	if len(s) <= n {
		return s
	}
	return slices.Clone(s[len(s)-n:])
}

// has reports whether the ledger lists path (under either of its names).
func (l *Ledger) has(path string) bool {
	for i := range l.Files {
		have := l.Files[i].Path
		if have == path || strings.HasSuffix(have, "/"+strings.TrimPrefix(path, "./")) || strings.HasSuffix(path, "/"+strings.TrimPrefix(have, "./")) {
			return true
		}
	}
	return false
}

func (l *Ledger) file(path, op string, seq int64) {
	path = cleanPath(path)
	if path == "" {
		return
	}
	for i := range l.Files {
		// One file under two names, relative and absolute: keep the
		// absolute one.
		have := l.Files[i].Path
		if !strings.HasPrefix(path, "/") && strings.HasSuffix(have, "/"+strings.TrimPrefix(path, "./")) {
			path = have
		} else if !strings.HasPrefix(have, "/") && strings.HasSuffix(path, "/"+strings.TrimPrefix(have, "./")) {
			l.Files[i].Path = path
		}
		if l.Files[i].Path == path {
			if op == OpEdited || op == OpCreated {
				l.Editing = path
			}
			if !slices.Contains(l.Files[i].Ops, op) {
				l.Files[i].Ops = append(l.Files[i].Ops, op)
			}
			l.Files[i].Seq = max(l.Files[i].Seq, seq)
			return
		}
	}
	l.Files = append(l.Files, File{Path: path, Ops: []string{op}, Seq: seq})
	if op == OpEdited || op == OpCreated {
		l.Editing = path
	}
}

func (l *Ledger) addError(e Issue) {
	for i := range l.Errors {
		if l.Errors[i].Error == e.Error && l.Errors[i].From == e.From {
			if e.Fix != "" {
				l.Errors[i].Fix = e.Fix
			}
			l.Errors[i].Seq = max(l.Errors[i].Seq, e.Seq)
			return
		}
	}
	l.Errors = append(l.Errors, e)
}

func (l *Ledger) ref(r string) {
	if r == "" || slices.Contains(l.Refs, r) {
		return
	}
	l.Refs = append(l.Refs, r)
}

// cleanPath trims quotes and punctuation around a path, and a trailing
// ":line" or ":line:col".
func cleanPath(p string) string {
	p = strings.Trim(strings.TrimSpace(p), "'\"`,;()[]{}<>")
	p = reLineSuffix.ReplaceAllString(p, "")
	if p == "" || p == "." || p == ".." || p == "/" || strings.ContainsAny(p, " \t\n*?$") || len(p) > 300 {
		return ""
	}
	return p
}

var reLineSuffix = regexp.MustCompile(`(:\d+)+:?$`)

// Message is what the ledger reads of a session message.
type Message struct {
	Role       string // "system", "user", "assistant" or "tool"
	Text       string
	Seq        int64
	ToolCalls  []Call
	ToolCallID string
	Name       string
	Summary    bool // a compaction message: skipped
	// Lookahead marks the message after the range read: it is read only
	// as the output of a text action that ends the range (a cut between
	// an agent's fenced command and its output), never on its own.
	Lookahead bool
}

// Call is one tool call of an assistant message.
type Call struct {
	ID, Name, Arguments string
}

// Extract reads msgs (in session order) and returns their ledger.
func Extract(msgs []Message) *Ledger {
	x := extractor{l: &Ledger{answered: map[string]bool{}}, calls: map[string]*call{}, people: people(msgs), answered: -1}
	for i := range msgs {
		x.message(msgs, i)
	}
	for _, id := range x.order {
		c := x.calls[id]
		if !x.l.answered[id] || c.running {
			x.inFlight(id, c)
		}
	}
	x.l.bound()
	return x.l
}

// call is a tool call waiting for its result.
type call struct {
	name string
	args map[string]any
	// cmd is the shell command, when it is one; shown, the command as the
	// ledger keeps it, at index cmdAt of its commands.
	cmd, shown string
	cmdAt      int
	seq        int64
	// running: a sub-agent whose result says it runs on.
	running bool
}

// people reports whether msgs are a conversation between people (no
// tools, the assistant side named): what one tells the other is advice,
// not an instruction to an agent.
func people(msgs []Message) bool {
	named := false
	for _, m := range msgs {
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			return false
		}
		named = named || (m.Role == "assistant" && m.Name != "" && !m.Summary)
	}
	return named
}

type extractor struct {
	people bool
	l      *Ledger
	calls  map[string]*call
	order  []string // calls' ids, in the order they were made
	// spoken is set once a message other than the system's came: the
	// first user message before it is the task.
	spoken   bool
	openFile string // SWE-agent's open file: its edit tool names none
	// open errors, by the program that reported them: the files edited
	// since, and the command that reported it.
	pending []*pendingError
	// answered is the index of the user message that is the output of
	// the last text action read (-1: none).
	answered int
}

type pendingError struct {
	idx     int // in l.Errors
	program string
	edited  []string
}

func (x *extractor) message(msgs []Message, i int) {
	m := &msgs[i]
	if m.Summary || m.Lookahead {
		return
	}
	if strings.Contains(m.Text, "[image") || strings.Contains(m.Text, "[file") {
		for _, ph := range rePlaceholder.FindAllString(m.Text, -1) {
			x.l.Attachments = append(x.l.Attachments, Attachment{Placeholder: ph, Role: m.Role, Seq: m.Seq})
		}
	}
	// A user message that answers an assistant's text action is the
	// action's output (mini-swe-agent, SWE-agent), not the user's words.
	observation := m.Role == "user" && x.answered == i
	if m.Role == "user" && !x.people && !observation {
		for _, in := range instructions(m.Text) {
			x.l.instruction(in)
		}
	}
	if m.Role == "user" && !x.spoken && !x.people && strings.TrimSpace(m.Text) != "" {
		x.l.Task = firstUser(m)
	}
	if m.Role == "user" && i > 0 && msgs[i-1].Role == "assistant" && !x.people && !observation {
		if a, ok := approval(msgs[i-1].Text, m.Text, m.Seq); ok {
			x.l.Approvals = append(x.l.Approvals, a)
		}
	}
	if m.Role != "system" {
		x.spoken = true
	}
	switch m.Role {
	case "assistant":
		if !x.people {
			if p := textPlan(m.Text); p != nil {
				p.Seq = m.Seq
				x.l.setPlan(p)
			}
		}
		for _, tc := range m.ToolCalls {
			c := &call{name: tc.Name, seq: m.Seq}
			_ = json.Unmarshal([]byte(tc.Arguments), &c.args)
			x.action(c)
			if items := toolPlan(c.args); items != nil {
				x.l.setPlan(&Plan{Items: items, From: tc.Name, Seq: m.Seq})
			}
			if _, seen := x.calls[tc.ID]; !seen && tc.ID != "" {
				x.order = append(x.order, tc.ID)
			}
			x.calls[tc.ID] = c
		}
		if len(m.ToolCalls) == 0 && i+1 < len(msgs) && msgs[i+1].Role == "user" {
			// SWE-agent's text actions: the last fenced block is the command,
			// and the next user message is its observation.
			if cmd := lastFence(m.Text); cmd != "" {
				c := textAction(cmd, m.Seq)
				x.action(c)
				x.result(c, msgs[i+1].Text, msgs[i+1].Seq)
				x.answered = i + 1
			}
		}
	case "tool":
		c := x.calls[m.ToolCallID]
		if c == nil {
			c = &call{name: m.Name, seq: m.Seq}
		}
		if m.ToolCallID != "" {
			x.l.answered[m.ToolCallID] = true
		}
		c.running = reAgentTool.MatchString(c.name) && reBackground.MatchString(m.Text)
		x.result(c, m.Text, m.Seq)
	}
}

// fileKeys are argument names that name a file, as canonKey writes them
// (path, file_path, filePath and FilePath are one key).
var fileKeys = []string{"path", "file", "filepath", "filename", "targetfile", "target", "source", "destination", "notebookpath", "absolutepath"}

// action records what a call does before its result is known.
func (x *extractor) action(c *call) {
	name := canonName(c.name)
	c.cmd = shellCommand(name, c.args)
	if c.cmd != "" {
		c.shown, c.cmdAt = clip(reHeredoc.ReplaceAllString(oneLine(c.cmd), "$1")), len(x.l.Commands)
		x.l.Commands = append(x.l.Commands, Command{Cmd: c.shown, Seq: c.seq})
		for _, f := range shellFiles(c.cmd) {
			x.file(f.path, f.op, c.seq)
		}
	}
	for _, f := range patchFiles(c.args) {
		x.file(f.path, f.op, c.seq) // a Codex-style patch envelope, whichever tool carries it
	}
	sub, _ := c.args["command"].(string)
	op := toolOp(name, sub)
	paths := argPaths(c.args)
	if searchTools[name] {
		paths = slices.DeleteFunc(paths, func(p string) bool { return !namesFile(p) }) // a search's root is no file it read
	}
	if op != "" && len(paths) == 0 && (name == "edit" || name == "insert" || name == "append") && x.openFile != "" {
		paths = []string{x.openFile} // SWE-agent edits the open file
	}
	for _, p := range paths {
		if op == "" {
			op = OpRead // a tool that names a file reads it, unless it says more
		}
		x.file(p, op, c.seq)
		if name == "open" || (editorTools[name] && sub == "view") || name == "create" {
			x.openFile = cleanPath(p)
		}
	}
	for k, v := range c.args {
		if s, ok := v.(string); ok && isRefKey(k) {
			x.l.ref(s)
		}
		if s, ok := v.(string); ok {
			for _, u := range reURL.FindAllString(s, 4) {
				x.l.ref(strings.TrimRight(u, ".,;)'\""))
			}
		}
	}
}

func (x *extractor) file(path, op string, seq int64) {
	path = cleanPath(path)
	if path == "" || !looksLikePath(path) {
		return
	}
	if op == opWritten {
		// A whole file written: created, unless the ledger has seen it.
		op = OpCreated
		if x.l.has(path) {
			op = OpEdited
		}
	}
	x.l.file(path, op, seq)
	if op == OpEdited || op == OpCreated || op == OpDeleted {
		for _, p := range x.pending {
			if !slices.Contains(p.edited, path) {
				p.edited = append(p.edited, path)
			}
		}
	}
}

// isShellTool reports whether a tool (by canonName) runs shell commands.
func isShellTool(name string) bool {
	switch name {
	case "bash", "executebash", "shell", "run", "runcommand", "terminal", "exec", "executecommand", "runshellcommand", "cmd", "sh", "zsh", "runterminalcmd", "execute":
		return true
	}
	return strings.Contains(name, "bash") || strings.Contains(name, "shell") || strings.Contains(name, "terminal")
}

// opWritten is a whole file written (Write, write_file, a shell's >):
// created when the ledger has not seen the file, else edited.
const opWritten = "written"

// canonName is a tool's name as the vocabularies below are written: lower
// case, without an MCP server's or a namespace's prefix
// ("mcp__filesystem__write_file", "functions.Read"), without '_' and '-'
// (MultiEdit, multi_edit and multi-edit are one tool).
func canonName(name string) string {
	name = strings.ToLower(name)
	if i := strings.LastIndex(name, "__"); i >= 0 && i+2 < len(name) {
		name = name[i+2:]
	}
	if i := strings.LastIndexAny(name, "./:"); i >= 0 && i+1 < len(name) {
		name = name[i+1:]
	}
	if strings.ContainsAny(name, "_-") {
		name = separators.Replace(name)
	}
	return name
}

// separators are the characters canonName drops.
var separators = strings.NewReplacer("_", "", "-", "")

// canonKey is an argument's name as fileKeys are written.
func canonKey(k string) string { return canonName(k) }

// editorTools take a sub-command (view, create, str_replace, ...): OpenHands'
// and Anthropic's text editors.
var editorTools = map[string]bool{"strreplaceeditor": true, "strreplacebasededittool": true, "texteditor": true, "editor": true, "fileeditor": true}

// toolOps is what a file tool of the common vocabularies does to the files
// it names, by canonName: Claude Code (Read, Write, Edit, MultiEdit,
// NotebookEdit), opencode and pi (read, write, edit, patch), Gemini CLI
// (read_file, read_many_files, write_file, replace), Cline (read_file,
// write_to_file, replace_in_file), Cursor (read_file, edit_file), Codex
// (apply_patch), SWE-agent (open, create, edit).
var toolOps = map[string]string{
	"write": opWritten, "writefile": opWritten, "writetofile": opWritten, "createfile": OpCreated, "newfile": OpCreated, "create": OpCreated,
	"edit": OpEdited, "editfile": OpEdited, "multiedit": OpEdited, "notebookedit": OpEdited, "strreplace": OpEdited, "replace": OpEdited,
	"replaceinfile": OpEdited, "searchreplace": OpEdited, "applypatch": OpEdited, "patch": OpEdited, "insert": OpEdited, "append": OpEdited,
	"delete": OpDeleted, "deletefile": OpDeleted, "removefile": OpDeleted, "rm": OpDeleted,
	"open": OpRead, "read": OpRead, "readfile": OpRead, "readmanyfiles": OpRead, "notebookread": OpRead, "view": OpRead, "viewfile": OpRead,
	"cat": OpRead, "openfile": OpRead,
}

// searchTools name a directory to search, not a file they read (one that
// names a file by its extension reads it).
var searchTools = map[string]bool{"glob": true, "grep": true, "search": true, "ls": true, "list": true, "listdir": true, "listdirectory": true,
	"listfiles": true, "find": true, "findfile": true, "searchfile": true, "searchdir": true, "codebasesearch": true, "filesearch": true,
	"searchfilecontent": true, "grepsearch": true}

// toolOp is what a file tool does to the files it names ("" when its
// name says nothing: a tool that names a file reads it).
func toolOp(name, sub string) string {
	if editorTools[name] {
		switch sub {
		case "view":
			return OpRead
		case "create":
			return opWritten
		case "str_replace", "insert", "undo_edit", "edit", "write":
			return OpEdited
		}
		return ""
	}
	return toolOps[name]
}

// shellCommand is the command line a shell tool runs: its command, cmd or
// script argument; a command given as an argv array (Codex's shell tool,
// ["bash", "-lc", "script"]) is its script, or its words quoted and
// joined (a patch given as one word is not read as commands).
func shellCommand(name string, args map[string]any) string {
	shell := isShellTool(name)
	for _, k := range []string{"command", "cmd", "script"} {
		switch v := args[k].(type) {
		case string:
			if shell || k == "cmd" {
				return v
			}
		case []any:
			if !shell && k != "cmd" {
				continue
			}
			words := make([]string, 0, len(v))
			for _, w := range v {
				if s, ok := w.(string); ok {
					words = append(words, s)
				}
			}
			if len(words) == 3 && (words[1] == "-lc" || words[1] == "-c") && isShellTool(words[0]) {
				return words[2]
			}
			for i, w := range words {
				if w == "" || strings.ContainsAny(w, " \t\n'\"\\;&|<>$`*?()") {
					words[i] = "'" + strings.ReplaceAll(w, "'", `'"'"'`) + "'"
				}
			}
			return strings.Join(words, " ")
		}
	}
	return ""
}

// argPaths are the files a call's arguments name, by fileKeys in their
// order and then any paths list.
func argPaths(args map[string]any) []string {
	var out []string
	byKey := make(map[string][]any, len(args))
	for k, v := range args {
		byKey[canonKey(k)] = append(byKey[canonKey(k)], v)
	}
	add := func(v any, single bool) {
		switch v := v.(type) {
		case string:
			if single && looksLikePath(v) {
				out = append(out, v)
			}
		case []any:
			for _, e := range v {
				if s, ok := e.(string); ok && looksLikePath(s) {
					out = append(out, s)
				}
			}
		}
	}
	for _, k := range fileKeys {
		for _, v := range byKey[k] {
			add(v, true)
		}
	}
	for _, v := range byKey["paths"] {
		add(v, false) // a list of files, never one
	}
	return out
}

// looksLikePath accepts a file name with an extension, a known extensionless
// file, or a path with a directory and a file name.
func looksLikePath(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 300 || strings.ContainsAny(s, " \t\n") || strings.HasPrefix(s, "-") || strings.Contains(s, "://") {
		return false
	}
	base := s[strings.LastIndexByte(s, '/')+1:]
	if base == "" {
		return false
	}
	if knownFiles[base] {
		return true
	}
	return reFileName.MatchString(base)
}

// namesFile is looksLikePath for a word that may as well be a name in code
// (a program's argument, not a redirection's target): a bare name is a
// file only by a file's extension, so "seg.raw", "os.path" and
// "sqlfluff.core.rules" are not.
func namesFile(s string) bool {
	if !looksLikePath(s) {
		return false
	}
	s = strings.TrimSpace(s)
	base := s[strings.LastIndexByte(s, '/')+1:]
	return strings.ContainsRune(s, '/') || knownFiles[base] || IsFileExt(base[strings.LastIndexByte(base, '.')+1:])
}

// IsFileExt reports whether ext (without its dot) is a common file
// extension: source, config, data, documents, archives, logs.
func IsFileExt(ext string) bool { return fileExts[strings.ToLower(ext)] }

var fileExts = func() map[string]bool {
	m := map[string]bool{}
	for _, e := range strings.Fields(`py pyi pyx pxd ipynb go mod sum js mjs cjs ts tsx jsx vue svelte json jsonl ndjson yaml yml toml ini cfg conf config env properties
		md markdown rst txt adoc tex html htm css scss sass less xml xsd svg csv tsv sql db sqlite parquet log out err
		c h cc cpp cxx hpp hh hxx m mm rs java kt kts scala groovy gradle clj rb erb php pl pm lua r jl ex exs erl hrl hs ml mli fs fsx cs vb swift dart zig nim
		sh bash zsh fish ps1 bat cmd mk cmake bzl bazel proto thrift graphql gql tf tfvars hcl nix dockerfile lock patch diff
		png jpg jpeg gif webp bmp ico pdf doc docx xls xlsx ppt pptx odt zip tar gz tgz bz2 xz zst 7z jar war whl egg so dylib dll exe o a bin dat npy npz pkl pickle pt pth h5 onnx
		j2 jinja jinja2 tpl tmpl mustache hbs ejs twig po pot mo crt pem key pub csr gitignore editorconfig bak orig tmp swp rej`) {
		m[e] = true
	}
	return m
}()

var (
	reFileName = regexp.MustCompile(`^[\w.@+-]*[\w@+-]\.[A-Za-z][A-Za-z0-9]{0,9}$`)
	knownFiles = map[string]bool{"Makefile": true, "Dockerfile": true, "README": true, "LICENSE": true, "Gemfile": true, "Rakefile": true,
		"Cargo.lock": true, "go.mod": true, "go.sum": true, "CMakeLists.txt": true, "Justfile": true, "Procfile": true}
	reURL = regexp.MustCompile(`https?://[^\s"'<>)\]]+`)
	// refKeys are argument names whose values are identifiers worth keeping.
	reRefKey = regexp.MustCompile(`(?i)(^id$|_id$|_ids?$|_number$|^ticket|^issue|^order|^reservation|^booking|^commit|^sha$|^branch$|^pr$|^url$)`)
)

// isRefKey reports whether argument name k matches reRefKey, comparing
// its ASCII lower case (every argument of every call is asked: the
// expression was a tenth of the ledger's work); a name holding a character
// (?i) folds into ASCII goes to the expression.
func isRefKey(k string) bool {
	if strings.ContainsAny(k, "\u017f\u212a") {
		return reRefKey.MatchString(k)
	}
	l := string(lowerLine(k, nil))
	switch l {
	case "id", "sha", "branch", "pr", "url":
		return true
	}
	if strings.HasSuffix(l, "_id") || strings.HasSuffix(l, "_ids") || strings.HasSuffix(l, "_number") {
		return true
	}
	for _, p := range []string{"ticket", "issue", "order", "reservation", "booking", "commit"} {
		if strings.HasPrefix(l, p) {
			return true
		}
	}
	return false
}

// textAction reads a SWE-agent text command ("open path", "edit 1:5",
// "create path", or a shell command).
func textAction(cmd string, seq int64) *call {
	f := strings.Fields(cmd)
	c := &call{seq: seq, args: map[string]any{}}
	switch f[0] {
	case "open", "create", "find_file", "search_file":
		c.name = f[0]
		if len(f) > 1 {
			key := "path"
			if f[0] == "find_file" || f[0] == "search_file" {
				key = "pattern"
				if len(f) > 2 {
					c.args["path"] = f[2]
				}
			}
			c.args[key] = strings.Trim(f[1], `"'`)
		}
	case "edit", "insert", "append":
		c.name = f[0]
	case "goto", "scroll_down", "scroll_up", "search_dir", "submit", "exit":
		c.name = f[0]
	default:
		c.name, c.args["command"] = "bash", cmd
	}
	return c
}

// ShellBlock returns the body of text's last fenced block that holds a
// shell command: a line opening with ``` and no language, or bash, sh,
// shell or console, up to the next ``` line ("" when there is none). A
// block in another language (```python) is an example, not an action.
func ShellBlock(text string) string {
	last, in, shell := "", false, false
	var cur []string
	for _, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case !in && strings.HasPrefix(t, "```"):
			lang := strings.ToLower(strings.TrimSpace(t[3:]))
			in, shell, cur = true, lang == "" || lang == "bash" || lang == "sh" || lang == "shell" || lang == "console", cur[:0]
		case in && t == "```":
			if in = false; shell {
				last = strings.Join(cur, "\n")
			}
		case in:
			cur = append(cur, line)
		}
	}
	return last
}

// lastFence returns the last fenced block's first line and, for an edit,
// nothing more (its body is the new text, not a command).
func lastFence(text string) string {
	body := strings.TrimSpace(ShellBlock(text))
	if body == "" {
		return ""
	}
	first, _, _ := strings.Cut(body, "\n")
	first = strings.TrimSpace(first)
	if f := strings.Fields(first); len(f) > 0 && (f[0] == "edit" || f[0] == "insert" || f[0] == "append") {
		return first
	}
	if strings.Contains(body, "\n") && !strings.HasSuffix(first, "\\") {
		return first // a multi-line block: its first line is the command
	}
	return body
}

var (
	// rePlaceholder is an attachment's placeholder on a line of its own.
	rePlaceholder = regexp.MustCompile(`(?m)^\[(image|file)( [^\]\n]*)?\]$`)
	reOpenFile    = regexp.MustCompile(`\(Open file: ([^)\s]+)\)`)
	reFileHeader  = regexp.MustCompile(`^\[File: (\S+) \(\d+ lines total\)\]`)
	reCreatedAt   = regexp.MustCompile(`(?i)\bfile created successfully at:? (\S+)`)
	reEditedFile  = regexp.MustCompile(`(?i)\bthe file (\S+) has been edited\b`)
	reCatN        = regexp.MustCompile("(?i)result of running `cat -n` on (?:a snippet of )?(\\S+?):?\\s")
	// reExit is an exit status, anchored: lastExit runs it only where
	// one of its words begins.
	reExit = regexp.MustCompile(`^(?i)(?:exit(?:ed)?(?: with)? (?:code|status)[: =]*|returncode[: =]+|exit_code[": =]+)(-?\d+)`)
	// reErrorLine is a line that reports an error.
	reErrorLine = regexp.MustCompile(`(?i)^(\w+(\.\w+)*(Error|Exception)\b.*|error(\[\w+\])?:.*|fatal:.*|panic:.*|E {2,}\S.*|FAILED\b.*|.*: command not found|.*: No such file or directory.*|.*\.\w+:\d+(:\d+)?: (error|fatal error): .*|.*\bSegmentation fault\b.*|Error: .*)$`)
	reTestLine  = regexp.MustCompile(`(?i)^(=+ .*\b(\d+ (passed|failed|errors?))\b.* =+|(ok|FAIL)\s+\S+\s+[\d.]+s|--- FAIL: \S+|Ran \d+ tests? in .*|(OK|FAILED)( \(.*\))?|Tests?:\s+.*\b(passed|failed)\b.*|test result: (ok|FAILED)\..*|\d+ (passing|failing)\b.*)$`)
)

// result records what a call's result says.
func (x *extractor) result(c *call, text string, seq int64) {
	x.resultFiles(text, seq)
	exit := -1
	from := c.name
	if c.cmd != "" {
		from = c.shown
		if e, ok := lastExit(text); ok {
			exit = e
			x.l.Commands[c.cmdAt].Exit = &e
		}
	}
	errs, tests := scan(text)
	for _, t := range tests {
		outcome := "passed"
		if reFailWord.MatchString(t) && !reZeroFail.MatchString(t) {
			outcome = "failed"
		}
		x.l.Tests = append(x.l.Tests, Test{Cmd: from, Outcome: outcome, Detail: clip(t), Seq: seq})
	}
	x.errorsOf(c, from, errs, exit, seq)
}

// lastExit is the exit status the last of text's statuses (reExit) says.
// Every one begins with "exit" or "returncode", in any case (no character
// outside ASCII folds to their letters), and holds no other: the
// expression runs where one begins, from the text's end, rather than at
// every place of a long output (half a mini-swe-agent ledger's work when
// it did).
func lastExit(text string) (int, bool) {
	l := lowerLine(text, nil)
	var at []int // where the words begin, in order
	for _, w := range [][]byte{[]byte("exit"), []byte("returncode")} {
		for i := 0; ; {
			j := bytes.Index(l[i:], w)
			if j < 0 {
				break
			}
			at = append(at, i+j)
			i += j + len(w)
		}
	}
	slices.Sort(at)
	for k := len(at) - 1; k >= 0; k-- {
		if m := reExit.FindStringSubmatch(text[at[k]:]); m != nil {
			n, err := strconv.Atoi(m[1])
			return n, err == nil
		}
	}
	return 0, false
}

// resultFiles records the files a tool's output names as read, created or
// edited, and the file an editor has open.
func (x *extractor) resultFiles(text string, seq int64) {
	if m := reFileHeader.FindStringSubmatch(strings.TrimSpace(text)); m != nil {
		x.file(m[1], OpRead, seq)
		x.openFile = cleanPath(m[1])
	}
	// Each expression runs only on a text that holds its words (a
	// regular expression over a long output is the costly part).
	if strings.Contains(text, "(Open file: ") {
		if m := reOpenFile.FindStringSubmatch(text); m != nil && m[1] != "n/a" {
			x.openFile = cleanPath(m[1])
		}
	}
	if strings.Contains(text, "reated successfully") {
		if m := reCreatedAt.FindStringSubmatch(text); m != nil {
			x.file(m[1], OpCreated, seq)
		}
	}
	if strings.Contains(text, "has been edited") {
		if m := reEditedFile.FindStringSubmatch(text); m != nil {
			x.file(m[1], OpEdited, seq)
		}
	}
	if strings.Contains(text, "cat -n") {
		if m := reCatN.FindStringSubmatch(text); m != nil {
			x.file(m[1], OpRead, seq)
		}
	}
}

// errorsOf records the errors of a call's output (errs, or its exit status
// when none is quoted) as waiting for a fix; a clean run of the program
// that reported errors fixes them, by what was edited since.
func (x *extractor) errorsOf(c *call, from string, errs []string, exit int, seq int64) {
	prog := program(c)
	if len(errs) == 0 && exit <= 0 {
		// The program that reported errors now runs clean: what was edited
		// since fixed them.
		var keep []*pendingError
		for _, p := range x.pending {
			if p.program != prog || prog == "" {
				keep = append(keep, p)
				continue
			}
			fix := "then `" + short(from, 60) + "` succeeded"
			if len(p.edited) > 0 {
				fix = "fixed by editing " + strings.Join(p.edited, ", ") + "; " + fix
			}
			x.l.Errors[p.idx].Fix = fix
		}
		x.pending = keep
		return
	}
	for _, e := range errs {
		before := len(x.l.Errors)
		x.l.addError(Issue{Error: clip(e), From: from, Seq: seq})
		if len(x.l.Errors) > before && prog != "" {
			x.pending = append(x.pending, &pendingError{idx: len(x.l.Errors) - 1, program: prog})
		}
	}
	if len(errs) == 0 && exit > 0 {
		x.l.addError(Issue{Error: "exit status " + strconv.Itoa(exit), From: from, Seq: seq})
		if prog != "" {
			x.pending = append(x.pending, &pendingError{idx: len(x.l.Errors) - 1, program: prog})
		}
	}
}

var (
	reFailedTest = regexp.MustCompile(`^(--- FAIL: \S+|FAILED \S+|FAIL\s+\S+)`)
	reFailWord   = regexp.MustCompile(`(?i)\b(fail(ed|ing|ures?)?|errors?)\b`)
	reZeroFail   = regexp.MustCompile(`(?i)^(ok\s|test result: ok|=+ \d+ passed in)|\b0 (failed|failures|errors?)\b`)
)

// program names what a call runs, so a later clean run of it can be told
// to have fixed its errors: a shell command's first two words, else the
// tool's name.
func program(c *call) string {
	if c.cmd != "" {
		segs := splitCommands(c.cmd)
		f := strings.Fields(segs[len(segs)-1])
		for _, s := range segs {
			if w := strings.Fields(s); len(w) > 0 && w[0] != "cd" && w[0] != "export" {
				f = w // the first command that is not a cd
				break
			}
		}
		if len(f) > 2 {
			f = f[:2]
		}
		return strings.Join(f, " ")
	}
	if ps := argPaths(c.args); len(ps) > 0 {
		return c.name + " " + cleanPath(ps[0])
	}
	return c.name
}

// scan returns a tool output's error lines (a traceback answered by its
// last line) and test summary lines, each once.
func scan(text string) (errs, tests []string) {
	lines := strings.Split(text, "\n")
	inTraceback := false
	var lower []byte
	for i, line := range lines {
		t := strings.TrimSpace(line)
		if t == "" {
			continue
		}
		if strings.HasPrefix(t, "Traceback (most recent call last)") {
			inTraceback = true
			continue
		}
		lower = lowerLine(t, lower)
		if inTraceback {
			if strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t") || i == len(lines)-1 && !errorLine(t, lower) {
				continue
			}
			inTraceback = false
		}
		if testLine(t, lower) {
			if !slices.Contains(tests, t) {
				tests = append(tests, t)
			}
			if reFailedTest.MatchString(t) && len(errs) < 3 && !slices.Contains(errs, t) {
				errs = append(errs, t) // a failing test is an error to fix
			}
			continue
		}
		if len(errs) < 3 && errorLine(t, lower) && !slices.Contains(errs, t) {
			if strings.HasSuffix(t, ":") && len(t) < 12 {
				// "ERROR:" alone: the message is on the next line.
				for _, next := range lines[i+1:] {
					if n := strings.TrimSpace(next); n != "" {
						t += " " + n
						break
					}
				}
			}
			errs = append(errs, t)
		}
	}
	return errs, tests
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// clip keeps a command or an error's text to maxText bytes.
func clip(s string) string { return short(strings.TrimSpace(s), maxText) }

// Records reports whether the ledger records what a call of tool name
// with arguments (JSON, perhaps cut short) did: a file it touched or a
// command it ran. Arguments cut short are judged by the tool's name: a
// shell or file tool of the vocabularies the ledger reads.
func Records(name, arguments string) bool {
	var args map[string]any
	if json.Unmarshal([]byte(arguments), &args) != nil {
		n := canonName(name)
		return isShellTool(n) || toolOps[n] != "" || editorTools[n]
	}
	x := &extractor{l: &Ledger{}, calls: map[string]*call{}}
	x.action(&call{name: name, args: args})
	return len(x.l.Files) > 0 || len(x.l.Commands) > 0
}
