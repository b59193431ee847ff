package ledger

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
)

// The working state: what the agent was doing where the range ends. The
// runtimes' users report its errors after a compaction (finished plans
// revived as active work, approvals asked again, sub-agents in flight
// forgotten); none of it is left to a summariser to remember.

// Plan item statuses, as the ledger writes them.
const (
	PlanDone       = "done"
	PlanInProgress = "in progress"
	PlanPending    = "pending"
	PlanCancelled  = "cancelled"
	// PlanStated is an item of a plan the agent wrote out without
	// tracking it (a numbered "plan:" list): its status is not known.
	PlanStated = "stated"
)

// Bounds of the working state.
const (
	maxTask      = 2000 // characters of the task kept
	maxPlan      = 40
	maxApprovals = 12
	maxInFlight  = 12
	maxPlanText  = 200
)

// PlanItem is one item of the agent's plan and its status.
type PlanItem struct {
	Text   string `json:"text"`
	Status string `json:"status"`
}

// Plan is the agent's plan as last written: by a planning tool (a todo
// list, update_plan, task_tracker), as a checklist, or as a numbered list.
type Plan struct {
	Items []PlanItem `json:"items"`
	// From is the tool that wrote it, "checklist" or "stated".
	From string `json:"from"`
	Seq  int64  `json:"seq,omitempty"`
}

// tracked reports whether the plan's statuses are the agent's own (not a
// stated list's unknowns).
func (p *Plan) tracked() bool { return p != nil && p.From != planStated }

const (
	planChecklist = "checklist"
	planStated    = "stated"
)

// Approval is a question the assistant asked before acting and the user's
// answer to it.
type Approval struct {
	Asked    string `json:"asked"`
	Approved bool   `json:"approved"`
	Answer   string `json:"answer"` // the opening of the user's reply
	Seq      int64  `json:"seq,omitempty"`
}

// Pending is a tool call with no result yet, or a sub-agent started and
// not known to have finished.
type Pending struct {
	ID    string `json:"id,omitempty"`
	Name  string `json:"name"`
	What  string `json:"what,omitempty"` // the call's arguments, short
	Agent bool   `json:"agent,omitempty"`
	Seq   int64  `json:"seq,omitempty"`
}

// Supersession is a user instruction a later one replaced.
type Supersession struct {
	Old string `json:"old"`
	New string `json:"new"`
}

var (
	// reAsk is a question asking leave to act.
	reAsk = regexp.MustCompile(`(?i)(would you like (me |us )?to (proceed|go ahead|continue)|shall i\b|should i (proceed|go ahead|continue)|do you want (me |us )?to (proceed|go ahead|continue)|please confirm|can you confirm|could you confirm|confirm (that|if|whether|the)|\(yes/no\)|\by/n\b|is (that|this) (ok|okay|correct|alright)|ok(ay)? to proceed|may i (proceed|go ahead)|can i (proceed|go ahead)|ready to proceed|do i have your (permission|approval|go-ahead))`)
	reYes = regexp.MustCompile(`(?i)^\W*(yes|yeah|yep|yup|sure|ok|okay|approved?|confirm(ed)?|go ahead|proceed|do it|please do|correct|that's (right|correct|fine)|sounds good|lgtm)\b`)
	reNo  = regexp.MustCompile(`(?i)^\W*(no|nope|don't|do not|cancel|stop|wait|hold on|not yet|negative)\b`)
	// reAgentTool names tools that start a sub-agent.
	reAgentTool = regexp.MustCompile(`(?i)^(task|agent|dispatch_agent|new_task)$|sub_?agent|spawn|delegate|launch_agent|run_agent|call_agent`)
	// reBackground is a sub-agent's result saying it runs on.
	reBackground = regexp.MustCompile(`(?i)\b(running in (the )?background|started in (the )?background|in the background|still running|launched|is running)\b`)
	reChecklist  = regexp.MustCompile(`^\s*(?:[-*]|\d{1,2}[.)])\s+\[( |x|X|~|-|/)\]\s+(.+?)\s*$`)
	rePlanHead   = regexp.MustCompile(`(?i)\bplan\b[^\n]{0,60}:\s*$`)
	reNumbered   = regexp.MustCompile(`^\s*(\d{1,2})[.)]\s+(.+?)\s*$`)
	// reSupersede marks an instruction that replaces an earlier one.
	reSupersede = regexp.MustCompile(`(?i)\b(instead|actually|no longer|from now on|anymore|any more|scratch that|change of plan|rather than|ignore (my|the|that) (earlier|previous|last))\b`)
	reWord      = regexp.MustCompile(`[A-Za-z][A-Za-z0-9_]{3,}`)
)

// planKeys are argument names that hold a plan's items; textKeys and
// statusKeys an item's text and status.
var (
	planKeys   = []string{"todos", "plan", "task_list", "tasks", "items", "steps", "checklist", "todo_list"}
	textKeys   = []string{"content", "step", "title", "description", "task", "text", "name"}
	statusKeys = []string{"status", "state"}
)

// planStatus reads a planning tool's status word.
func planStatus(s string) string {
	switch strings.ToLower(strings.ReplaceAll(strings.TrimSpace(s), "-", "_")) {
	case "completed", "complete", "done", "finished", "x", "resolved", "closed":
		return PlanDone
	case "in_progress", "inprogress", "active", "doing", "started", "running", "current", "~", "/":
		return PlanInProgress
	case "cancelled", "canceled", "skipped", "dropped", "abandoned", "-":
		return PlanCancelled
	case "pending", "todo", "to_do", "not_started", "open", "planned", "", " ", "queued", "blocked":
		return PlanPending
	}
	return ""
}

// toolPlan reads a plan from a call's arguments: a list of items with a
// text and a status, under one of planKeys; nil when there is none.
func toolPlan(args map[string]any) []PlanItem {
	for _, k := range planKeys {
		list, ok := args[k].([]any)
		if !ok {
			continue
		}
		items := []PlanItem{}
		for _, e := range list {
			obj, ok := e.(map[string]any)
			if !ok {
				return nil
			}
			var it PlanItem
			for _, tk := range textKeys {
				if s, ok := obj[tk].(string); ok && strings.TrimSpace(s) != "" {
					it.Text = short(oneLine(s), maxPlanText)
					break
				}
			}
			found := false
			for _, sk := range statusKeys {
				if s, ok := obj[sk].(string); ok {
					it.Status, found = planStatus(s), true
					break
				}
			}
			if it.Text == "" || !found || it.Status == "" {
				return nil
			}
			items = append(items, it)
		}
		return items
	}
	return nil
}

// textPlan reads a checklist ("- [x] item") of two items or more, else a
// numbered list under a line that names a plan, from an assistant's text.
func textPlan(text string) *Plan {
	lines := strings.Split(text, "\n")
	var check []PlanItem
	for _, l := range lines {
		if !strings.Contains(l, "[") {
			continue // (every checklist item has its box)
		}
		if m := reChecklist.FindStringSubmatch(l); m != nil {
			check = append(check, PlanItem{Text: short(oneLine(m[2]), maxPlanText), Status: planStatus(m[1])})
		}
	}
	if len(check) >= 2 {
		return &Plan{Items: check, From: planChecklist}
	}
	var lower []byte
	for i, l := range lines {
		if !strings.Contains(l, ":") {
			continue // (a plan's head ends with one)
		}
		// "plan" has no letter (?i) folds from outside ASCII.
		if lower = lowerLine(l, lower); !bytes.Contains(lower, []byte("plan")) || !rePlanHead.MatchString(l) {
			continue
		}
		var items []PlanItem
		for _, n := range lines[i+1:] {
			if strings.TrimSpace(n) == "" && len(items) == 0 {
				continue
			}
			m := reNumbered.FindStringSubmatch(n)
			if m == nil {
				if len(items) > 0 && strings.HasPrefix(n, "   ") {
					continue // an item's continuation
				}
				break
			}
			items = append(items, PlanItem{Text: short(oneLine(m[2]), maxPlanText), Status: PlanStated})
		}
		if len(items) >= 2 {
			return &Plan{Items: items, From: planStated}
		}
	}
	return nil
}

// setPlan takes p as the plan unless it is a stated list and the plan in
// force is tracked (a tool's or a checklist's statuses are the better
// record).
func (l *Ledger) setPlan(p *Plan) {
	if p == nil || (!p.tracked() && l.Plan.tracked()) {
		return
	}
	if len(p.Items) > maxPlan {
		p.Items = p.Items[len(p.Items)-maxPlan:]
	}
	l.Plan = p
}

// approval reads the user's reply to an assistant's question asking leave
// to act; ok is false when the question asks none or the reply neither
// grants nor refuses it.
func approval(asked, reply string, seq int64) (Approval, bool) {
	tail := asked
	if len(tail) > 400 {
		tail = tail[len(tail)-400:]
	}
	// The reply first: anchored, it is cheap where the question's
	// expression, run at every place of the tail, is not; and on its
	// opening alone (replyHead), which answers as the whole reply does,
	// since the expressions' backtracker clears a table the size of what
	// it is given (issue 43: a fifth of the ledger's time on tau-bench).
	head := replyHead(reply)
	yes, no := reYes.MatchString(head), reNo.MatchString(head)
	if yes == no {
		return Approval{}, false
	}
	from := askFrom(tail, lowerLine(tail, nil))
	if from < 0 {
		return Approval{}, false
	}
	loc := reAsk.FindStringIndex(tail[from:])
	if loc == nil {
		return Approval{}, false
	}
	return Approval{Asked: short(oneLine(sentenceAt(tail, from+loc[0])), 100), Approved: yes, Answer: short(oneLine(reply), 40), Seq: seq}, true
}

// replyHead is as much of reply as reYes and reNo can read: the run
// before its first ASCII letter, digit or underscore (their \W*, where
// a word of theirs may begin too, as ſ and the Kelvin sign fold to s and
// k), then replyHeadBytes, more than their longest word (15 letters, at
// most 45 bytes with such folds) and the character their \b looks at.
// With no such character neither can match: each of their words holds
// one.
func replyHead(reply string) string {
	p := strings.IndexFunc(reply, func(r rune) bool {
		return r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	})
	switch {
	case p < 0:
		return ""
	case len(reply) <= p+replyHeadBytes:
		return reply
	}
	return reply[:p+replyHeadBytes]
}

const replyHeadBytes = 64

// sentenceAt is the sentence of s that holds byte i.
func sentenceAt(s string, i int) string {
	start := strings.LastIndexAny(s[:i], ".!?\n")
	end := strings.IndexAny(s[i:], "?!\n")
	if end < 0 {
		end = len(s) - i
	} else {
		end++
	}
	return strings.TrimSpace(s[start+1 : i+end])
}

// supersede records that instruction in replaces an earlier one when it
// says so (instead, from now on, no longer ...) and shares two words of
// four letters or more with it.
func (l *Ledger) supersede(in string) {
	if !reSupersede.MatchString(in) {
		return
	}
	words := map[string]bool{}
	for _, w := range reWord.FindAllString(strings.ToLower(in), -1) {
		words[w] = true
	}
	for i := len(l.Instructions) - 1; i >= 0; i-- {
		old := l.Instructions[i]
		if old == in || l.supersededBy(old) != "" {
			continue
		}
		shared := 0
		for _, w := range reWord.FindAllString(strings.ToLower(old), -1) {
			if words[w] && !stopWords[w] {
				shared++
			}
		}
		if shared >= 2 {
			l.Superseded = append(l.Superseded, Supersession{Old: old, New: in})
			return
		}
	}
}

var stopWords = map[string]bool{"please": true, "always": true, "never": true, "make": true, "sure": true, "that": true, "this": true, "with": true,
	"from": true, "instead": true, "actually": true, "should": true, "must": true, "your": true, "they": true, "them": true, "have": true, "when": true,
	"longer": true, "anymore": true, "more": true, "rather": true, "than": true, "will": true, "what": true, "there": true, "then": true, "just": true}

// supersededBy is the instruction that replaced in, or "".
func (l *Ledger) supersededBy(in string) string {
	for _, s := range l.Superseded {
		if s.Old == in {
			return s.New
		}
	}
	return ""
}

// Done reports whether text names an item of the plan that is done: the
// item's words are in text, or text's are in the item (case and
// punctuation aside, three words or more).
func (l *Ledger) Done(text string) bool {
	if l == nil || !l.Plan.tracked() {
		return false
	}
	t := fold(text)
	if len(strings.Fields(t)) == 0 {
		return false
	}
	for _, it := range l.Plan.Items {
		if it.Status != PlanDone {
			continue
		}
		i := fold(it.Text)
		if len(strings.Fields(i)) >= 3 && strings.Contains(t, i) || len(strings.Fields(t)) >= 3 && strings.Contains(i, t) {
			return true
		}
	}
	return false
}

var reNonWord = regexp.MustCompile(`[^a-z0-9]+`)

func fold(s string) string {
	return strings.TrimSpace(reNonWord.ReplaceAllString(strings.ToLower(s), " "))
}

// inFlight records a call that has no result yet.
func (x *extractor) inFlight(id string, c *call) {
	p := Pending{ID: id, Name: c.name, What: short(oneLine(callWhat(c)), 120), Agent: reAgentTool.MatchString(c.name), Seq: c.seq}
	x.l.InFlight = append(x.l.InFlight, p)
}

// callWhat is what a call's arguments say it does: its command, its
// description or prompt, or its first string argument.
func callWhat(c *call) string {
	if c.cmd != "" {
		return c.cmd
	}
	for _, k := range []string{"description", "prompt", "task", "query", "path", "url"} {
		if s, ok := c.args[k].(string); ok && s != "" {
			return s
		}
	}
	keys := make([]string, 0, len(c.args))
	for k := range c.args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if s, ok := c.args[k].(string); ok && s != "" {
			return k + "=" + s
		}
	}
	return ""
}

// resolve takes the calls answered in a later range off the in-flight
// list (a sub-agent that said it runs on in the background stays).
func resolve(inFlight []Pending, answered map[string]bool) []Pending {
	var out []Pending
	for _, p := range inFlight {
		if p.ID == "" || !answered[p.ID] {
			out = append(out, p)
		}
	}
	return out
}

// firstUser is the task: the opening of the first user message that is
// not empty, up to maxTask characters.
func firstUser(m *Message) string {
	t := strings.TrimSpace(m.Text)
	if len(t) > maxTask {
		cut := strings.LastIndexAny(t[:maxTask], " \n")
		if cut < maxTask/2 {
			cut = maxTask
		}
		t = t[:cut] + " …"
	}
	return t
}
