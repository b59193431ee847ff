package eval

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// Probe categories.
const (
	ProbeFiles        = "files"        // a file a tool call read, created or edited: its name
	ProbeErrors       = "errors"       // an error line a tool reported: its opening
	ProbeCommands     = "commands"     // a shell command the agent ran: its opening
	ProbeDecisions    = "decisions"    // an identifier a state-changing call acted on (book, cancel, update, submit)
	ProbeInstructions = "instructions" // an imperative sentence the user wrote, verbatim
	ProbePlan         = "plan"         // a plan item and its status, from the last planning call summarised
	ProbeLoCoMo       = "locomo"       // a LoCoMo answer (evidence summarised)
)

// ProbeKinds lists the categories in report order.
var ProbeKinds = []string{ProbeFiles, ProbeErrors, ProbeCommands, ProbeDecisions, ProbeInstructions, ProbePlan, ProbeLoCoMo}

// Probe is one thing the compacted context should still say once the
// message it comes from is summarised.
type Probe struct {
	Kind string `json:"kind"`
	Msg  int    `json:"msg"`  // index in the conversation
	Want string `json:"want"` // normalised text the context must contain
	// Until is the message that supersedes the probe (the next planning
	// call, for a plan item); 0: none. A superseded probe is not checked
	// once its successor is summarised too.
	Until int `json:"until,omitempty"`
	// Text is what Want was cut from (a command whole, an error's line):
	// what a search for it asks.
	Text string `json:"-"`
}

// Tally counts probe checks: one per probe per compaction after which its
// message is summarised.
type Tally struct {
	Checks int `json:"checks"`
	Kept   int `json:"kept"`
}

// Share is Kept/Checks (1 when nothing was checked).
func (t Tally) Share() float64 {
	if t.Checks == 0 {
		return 1
	}
	return float64(t.Kept) / float64(t.Checks)
}

func (t Tally) add(o Tally) Tally { return Tally{Checks: t.Checks + o.Checks, Kept: t.Kept + o.Kept} }

// ProbeReport is one conversation replayed with its probes checked after
// every compaction.
type ProbeReport struct {
	Name        string           `json:"name"`
	Source      string           `json:"source"`
	Limit       int              `json:"context_limit"`
	Probes      int              `json:"probes"`
	Compactions int              `json:"compactions"`
	Scores      map[string]Tally `json:"scores"`
	// LoCoMo's truncation baselines: the summary replaced by the first or
	// the last as many tokens of the summarised range, the tail the same.
	First Tally `json:"locomo_first,omitempty"`
	Last  Tally `json:"locomo_last,omitempty"`
	// InstructionBullets counts the "User instructions" bullets seen in
	// the compacted contexts; Invented, those the user never wrote.
	InstructionBullets int `json:"instruction_bullets"`
	Invented           int `json:"invented_instructions"`
	// Dropped sums the results' instructions_dropped.
	Dropped int `json:"instructions_dropped"`
	// On the prepared path (eval probes --prepared): the preparations
	// made and the compactions committed from one.
	Preparations    int `json:"preparations,omitempty"`
	FromPreparation int `json:"from_preparation,omitempty"`
	// Missed lists probes the context lost (each once, at most 20).
	Missed []Probe `json:"missed,omitempty"`
}

// Add sums o into r (per category).
func (r *ProbeReport) Add(o ProbeReport) {
	if r.Scores == nil {
		r.Scores = map[string]Tally{}
	}
	for k, t := range o.Scores {
		r.Scores[k] = r.Scores[k].add(t)
	}
	r.Probes += o.Probes
	r.Compactions += o.Compactions
	r.First, r.Last = r.First.add(o.First), r.Last.add(o.Last)
	r.InstructionBullets += o.InstructionBullets
	r.Invented += o.Invented
	r.Dropped += o.Dropped
	r.Preparations += o.Preparations
	r.FromPreparation += o.FromPreparation
}

var (
	// notFiles are the arguments of a command that name no file: a sed or
	// perl substitution script ('s/old/new/'), and a find's patterns
	// (-name "build.gradle" looks for one; it touches none).
	notFiles  = regexp.MustCompile(`'s([/|#])[^']*'|"s([/|#])[^"]*"|-(?:i?name|i?path|wholename|i?regex)\s+(?:"[^"]*"|'[^']*'|\S+)`)
	probePath = regexp.MustCompile(`(?:^|[\s"'=(/])((?:[\w.@-]+/)*[\w@-][\w.@-]*\.[A-Za-z][A-Za-z0-9]{0,5})\b`)
	probeErr  = regexp.MustCompile(`(?i)^(\w+(Error|Exception)\b.*|error(\[\w+\])?:\s*\S.*|fatal:.*|.*: command not found|.*: No such file or directory.*|.*\.\w+:\d+(:\d+)?: error: .*|Error: .*|FAILED \S+.*)$`)
	probeInst = regexp.MustCompile(`(?i)^(please|always|never|don't|do not|make sure|ensure|avoid|remember to|from now on|only)\b|\b(you must|you should|i want you to|i need you to)\b`)
	// stateCalls name calls that change something (tau-bench's writes,
	// an agent's submission).
	stateCalls = regexp.MustCompile(`^(book|cancel|update|send|transfer|create|delete|modify|exchange|return|submit|finish)`)
	idKeys     = regexp.MustCompile(`(?i)(_id|_number|^id)$`)
	fileArgs   = []string{"path", "file", "file_path", "filepath", "filename", "file_name", "target_file"}
)

// norm folds case, quotes, backticks and whitespace.
func norm(s string) string {
	s = strings.NewReplacer("`", "'", "\u201c", `"`, "\u201d", `"`, "\u2018", "'", "\u2019", "'").Replace(s)
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// BuildProbes derives the probes of a conversation from its messages
// alone: tool-call arguments (files, commands, identifiers), tool results
// (errors), the user's imperative sentences, and LoCoMo's QA (checked by
// Measure's rule).
func BuildProbes(c transcript.Conversation) []Probe {
	var out []Probe
	seen := map[string]bool{}
	add := func(kind string, i int, want, text string) {
		want = norm(want)
		if len(want) < 3 || seen[kind+"\x00"+want] {
			return
		}
		seen[kind+"\x00"+want] = true
		out = append(out, Probe{Kind: kind, Msg: i, Want: want, Text: text})
	}
	// A shell command: its opening, and the files it names.
	command := func(i int, cmd string) {
		add(ProbeCommands, i, opening(cmd, 30), cmd)
		for _, p := range probePath.FindAllStringSubmatch(notFiles.ReplaceAllString(cmd, " "), -1) {
			if !strings.Contains(p[1], "://") && !isNumberish(p[1]) && fileName(p[1]) {
				add(ProbeFiles, i, base(p[1]), base(p[1]))
			}
		}
	}
	lastPlan := -1 // the first probe of the last planning call
	for i, m := range c.Messages {
		for _, tc := range m.ToolCalls {
			var args map[string]any
			_ = json.Unmarshal([]byte(tc.Function.Arguments), &args)
			if items := planItems(args); items != nil {
				for j := lastPlan; j >= 0 && j < len(out); j++ {
					if out[j].Kind == ProbePlan && out[j].Until == 0 {
						out[j].Until = i
					}
				}
				lastPlan = len(out)
				for _, it := range items {
					// Each call's items are probes of their own: the
					// same item with a new status is a new probe.
					out = append(out, Probe{Kind: ProbePlan, Msg: i, Want: norm(it)})
				}
			}
			for _, k := range fileArgs {
				if s, ok := args[k].(string); ok {
					if p := probePath.FindStringSubmatch(" " + s); p != nil {
						add(ProbeFiles, i, base(p[1]), base(p[1]))
					}
				}
			}
			if cmd, ok := args["command"].(string); ok && !editorCommand(cmd) {
				command(i, cmd)
			}
			if stateCalls.MatchString(tc.Function.Name) {
				for k, v := range args {
					if s, ok := v.(string); ok && idKeys.MatchString(k) {
						add(ProbeDecisions, i, s, s)
					}
				}
			}
		}
		if cmd := textAction(c.Messages, i); cmd != "" && !sweAgentCommand(cmd) {
			command(i, cmd)
		}
		switch {
		case m.Role == session.RoleTool || m.Role == session.RoleUser && textAction(c.Messages, i-1) != "":
			// A tool's result, or the output of an action the assistant
			// wrote in its text (mini-swe-agent 1.x, SWE-agent).
			for _, line := range strings.Split(m.Content.Text, "\n") {
				if t := strings.TrimSpace(line); probeErr.MatchString(t) {
					add(ProbeErrors, i, opening(t, 40), t)
				}
			}
		case m.Role == session.RoleUser && c.Source != "locomo":
			// What the user quotes in a fenced block (a crash log's
			// "PLEASE submit a bug report") is not an instruction.
			for _, s := range splitSentences(ledger.Prose(m.Content.Text)) {
				if probeInst.MatchString(s) && len(strings.Fields(s)) >= 3 && len(s) <= 300 {
					add(ProbeInstructions, i, s, s)
				}
			}
		}
	}
	return out
}

// textAction is the shell command message i writes as its action in a
// fenced block (mini-swe-agent 1.x, SWE-agent: an assistant message
// without tool calls, answered by a user message): its first line.
func textAction(msgs []session.Message, i int) string {
	if i < 0 || i+1 >= len(msgs) || msgs[i].Role != session.RoleAssistant || len(msgs[i].ToolCalls) > 0 || msgs[i+1].Role != session.RoleUser {
		return ""
	}
	first, _, _ := strings.Cut(strings.TrimSpace(ledger.ShellBlock(msgs[i].Content.Text)), "\n")
	return strings.TrimSpace(first)
}

// planItems reads a planning tool's whole list as the runtimes write it
// (Claude Code's TodoWrite todos, Codex's update_plan plan, OpenHands'
// task_tracker task_list): "[status] text" each, the status done, in
// progress or pending; nil when args hold no plan.
func planItems(args map[string]any) []string {
	for _, k := range []string{"todos", "plan", "task_list"} {
		list, ok := args[k].([]any)
		if !ok {
			continue
		}
		var out []string
		for _, e := range list {
			obj, _ := e.(map[string]any)
			text := ""
			for _, tk := range []string{"content", "step", "title"} {
				if s, ok := obj[tk].(string); ok && s != "" {
					text = s
					break
				}
			}
			status, _ := obj["status"].(string)
			switch status {
			case "completed", "done":
				status = "done"
			case "in_progress":
				status = "in progress"
			case "pending", "todo":
				status = "pending"
			default:
				return nil
			}
			if text == "" {
				return nil
			}
			out = append(out, "["+status+"] "+opening(text, 40))
		}
		return out
	}
	return nil
}

// sweAgentCommand reports whether a text action is one of SWE-agent's
// file viewer and editor commands rather than a shell command.
func sweAgentCommand(s string) bool {
	switch verb, _, _ := strings.Cut(s, " "); verb {
	case "open", "create", "edit", "insert", "append", "goto", "scroll_down", "scroll_up", "find_file", "search_file", "search_dir", "submit", "exit":
		return true
	}
	return false
}

func editorCommand(s string) bool {
	switch s {
	case "view", "create", "str_replace", "insert", "undo_edit":
		return true
	}
	return false
}

// fileName tells a file named in a command from a name in code: a bare
// name ("seg.raw", "os.path") is a file only by a file's extension.
func fileName(s string) bool {
	return strings.ContainsRune(s, '/') || ledger.IsFileExt(s[strings.LastIndexByte(s, '.')+1:])
}

func isNumberish(s string) bool { return strings.Trim(s, "0123456789.") == "" }

func base(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// opening is the first n bytes of s, whitespace folded, cut at a word.
func opening(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := strings.LastIndexByte(s[:n], ' ')
	if cut < n/2 {
		cut = n
		for cut > 0 && s[cut]&0xC0 == 0x80 {
			cut--
		}
	}
	return s[:cut]
}

var sentenceEnd = regexp.MustCompile(`[.!?]+["')]*(\s+|$)|\n+`)

func splitSentences(t string) []string {
	var out []string
	for _, s := range sentenceEnd.Split(t, -1) {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ProbeReplay replays c on loop like ReplayOn and, after every compaction,
// checks each probe whose message is summarised against the compacted
// context: its text, lower-cased, holds the probe's.
func ProbeReplay(ctx context.Context, loop Loop, c transcript.Conversation, counter *tokens.Counter, cfg pipeline.Config, limit int) (ProbeReport, error) {
	probes := BuildProbes(c)
	rep := ProbeReport{Name: c.Name, Source: c.Source, Limit: limit, Probes: len(probes), Scores: map[string]Tally{}}
	userText := norm(writtenByUser(c.Messages))
	check := func(view []session.Message, tail int64, res *pipeline.Result) {
		rep.Compactions++
		rep.Dropped += res.InstructionsDropped
		text := norm(contextText(view))
		summarised := func(i int) bool { return int64(i+1) < tail }
		for _, p := range probes {
			if !summarised(p.Msg) || p.Until > 0 && summarised(p.Until) {
				continue
			}
			t := rep.Scores[p.Kind]
			t.Checks++
			if strings.Contains(text, p.Want) {
				t.Kept++
			} else if len(rep.Missed) < 20 && !slices.Contains(rep.Missed, p) {
				rep.Missed = append(rep.Missed, p)
			}
			rep.Scores[p.Kind] = t
		}
		for _, m := range view {
			if !m.IsCompaction || m.Compaction == nil {
				continue
			}
			s, _ := summary.Parse(m.Compaction.SummaryText)
			for _, b := range s.Sections[summary.Instructions] {
				rep.InstructionBullets++
				if !quotes(userText, b) {
					rep.Invented++
				}
			}
		}
		if len(c.QA) == 0 {
			return
		}
		units := ContextUnits(view)
		var tailMsgs []session.Message
		sumTokens := 0
		for _, m := range view {
			if m.IsCompaction {
				if m.Compaction != nil {
					sumTokens += counter.Count(m.Compaction.SummaryText)
				}
				continue
			}
			tailMsgs = append(tailMsgs, m)
		}
		r := Measure(c, summarised, units)
		t := rep.Scores[ProbeLoCoMo]
		rep.Scores[ProbeLoCoMo] = t.add(Tally{Checks: r.Eligible, Kept: r.Kept})
		if sumTokens > 0 && tail > 1 {
			first, last := Baselines(counter, c.Messages[:min(int(tail-1), len(c.Messages))], sumTokens)
			tailUnits := ContextUnits(tailMsgs)
			rf := Measure(c, summarised, append(first, tailUnits...))
			rl := Measure(c, summarised, append(last, tailUnits...))
			rep.First = rep.First.add(Tally{Checks: rf.Eligible, Kept: rf.Kept})
			rep.Last = rep.Last.add(Tally{Checks: rl.Eligible, Kept: rl.Kept})
		}
	}
	_, err := replay(ctx, loop, c, counter, cfg, limit, func(view []session.Message, tail int64, res *pipeline.Result) error {
		check(view, tail, res)
		return nil
	})
	return rep, err
}

// contextText is everything a compacted context says: summaries, raw
// messages, tool calls' names and arguments.
func contextText(view []session.Message) string {
	var sb strings.Builder
	for _, m := range view {
		sb.WriteString(m.Content.Text)
		sb.WriteByte('\n')
		for _, tc := range m.ToolCalls {
			sb.WriteString(tc.Function.Name + " " + tc.Function.Arguments + "\n")
		}
	}
	return sb.String()
}

// writtenByUser is what the user and the system messages wrote.
func writtenByUser(msgs []session.Message) string {
	var sb strings.Builder
	for _, m := range msgs {
		if m.Role == session.RoleUser || m.Role == session.RoleSystem {
			sb.WriteString(m.Content.Text)
			sb.WriteString("\n\x00\n")
		}
	}
	return sb.String()
}

var attribution = regexp.MustCompile(`^[\w .'-]{1,40}:\s+`)

// quotes reports whether bullet quotes what the user wrote (normalised in
// written): its quoted parts, or its sentences after an attribution.
func quotes(written, bullet string) bool {
	b := strings.NewReplacer("\u201c", `"`, "\u201d", `"`).Replace(bullet)
	var parts []string
	if qs := regexp.MustCompile(`"([^"]{3,})"`).FindAllStringSubmatch(b, -1); len(qs) > 0 {
		for _, q := range qs {
			parts = append(parts, q[1])
		}
	} else {
		parts = []string{attribution.ReplaceAllString(b, "")}
	}
	for _, p := range parts {
		for _, s := range regexp.MustCompile(`[.!?;]+["')]*\s+|\s*…\s*`).Split(p, -1) {
			s = strings.Trim(strings.TrimSpace(s), `"'.!?;:,()[]`)
			if s != "" && !said(written, norm(s)) {
				return false
			}
		}
	}
	return true
}

var (
	negation = regexp.MustCompile(`^(please )?(don't|do not|never|not|no|avoid|stop)\b`)
	negated  = regexp.MustCompile(`\b(don't|do not|never|not|no|avoid|stop|without|n't)\s*$`)
)

// said reports whether written holds s as whole words, and not right after
// a negation s leaves out.
func said(written, s string) bool {
	word := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b >= 0x80 }
	for from := 0; ; {
		i := strings.Index(written[from:], s)
		if i < 0 {
			return false
		}
		i += from
		from = i + 1
		end := i + len(s)
		if (i > 0 && word(written[i-1]) && word(s[0])) || (end < len(written) && word(written[end]) && word(s[len(s)-1])) {
			continue
		}
		if !negation.MatchString(s) && negated.MatchString(written[max(0, i-24):i]) {
			continue
		}
		return true
	}
}

// ProbeTotals sums reports per source, in a stable order.
func ProbeTotals(reps []ProbeReport) []ProbeReport {
	by := map[string]*ProbeReport{}
	for _, r := range reps {
		t := by[r.Source]
		if t == nil {
			t = &ProbeReport{Name: "all", Source: r.Source, Limit: r.Limit, Scores: map[string]Tally{}}
			by[r.Source] = t
		}
		t.Add(r)
	}
	var out []ProbeReport
	for _, t := range by {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out
}
