package ledger

import (
	"fmt"
	"regexp"
	"strings"
)

// Rendered is a ledger written as summary bullets.
type Rendered struct {
	State        []string // for "Working state"
	Instructions []string // for "User instructions": the user's words
	Files        []string // for "Files and artifacts"
	Errors       []string // for "Errors and fixes"
	// Tokens is what the bullets cost in a summary: count("- "+b+"\n")+1
	// each.
	Tokens int
}

// All returns every bullet.
func (r Rendered) All() []string {
	return append(append(append(append([]string(nil), r.State...), r.Instructions...), r.Files...), r.Errors...)
}

// limits is how much of each list a rendering shows (the newest entries).
type limits struct {
	files        [4]int // per operation, in opOrder
	tests        int
	commands     int
	refs         int
	fixed        int // errors that were fixed
	attachments  int
	open         int // errors still open
	instructions int
	task         int // characters of the task
	plan         int // plan items (the newest)
	approvals    int
	inFlight     int
	state        bool // the working state is rendered
}

// Render writes the ledger as bullets whose lines, counted with count
// ("- " + bullet + "\n" each), total at most maxTokens. The task shows
// at most maxTokens/2 characters (it is the summary's goal too). When the
// whole ledger is over, it shows less, in this order: approvals down to
// the last, the task down to 160 characters, commands down to the last
// eight, test runs, fixed errors, open errors down to two, the rest of the
// commands, attachments down to four, files only
// read, calls in flight down to two, identifiers down to eight, then the
// oldest files changed, the last open errors and attachments, the task,
// the approvals, the last identifiers (the ids a session acted on outlast
// the quote of an approval), calls in flight, plan items and instructions,
// and the state's own bullets last; a list cut short says how many it
// leaves out. Long lists lose a quarter at a time.
func Render(l *Ledger, count func(string) int, maxTokens int) Rendered {
	return render(l, count, maxTokens, true)
}

// RenderWithState is Render with the working state apart: the rest of
// the ledger within maxTokens as if there were no state, and the state
// within stateTokens and what the rest leaves of maxTokens (its plan,
// approvals and task shortened, else none of it).
func RenderWithState(l *Ledger, count func(string) int, maxTokens, stateTokens int) Rendered {
	rest := render(l, count, maxTokens, false)
	stateTokens += maxTokens - rest.Tokens
	st := render(l.stateOnly(), count, stateTokens, true)
	rest.State, rest.Tokens = st.State, rest.Tokens+st.Tokens
	return rest
}

// stateOnly is a ledger of l's working state (and the last command and
// the errors still open, which the state names).
func (l *Ledger) stateOnly() *Ledger {
	if l == nil {
		return nil
	}
	out := &Ledger{Task: l.Task, Plan: l.Plan, Approvals: l.Approvals, InFlight: l.InFlight, Editing: l.Editing}
	if n := len(l.Commands); n > 0 {
		out.Commands = l.Commands[n-1:]
	}
	for _, e := range l.Errors {
		if e.Fix == "" {
			out.Errors = append(out.Errors, Issue{Error: e.Error})
		}
	}
	return out
}

func render(l *Ledger, count func(string) int, maxTokens int, withState bool) Rendered {
	if l.Empty() || maxTokens <= 0 {
		return Rendered{}
	}
	byOp := l.byOp()
	fixed, open := 0, 0
	for _, e := range l.Errors {
		if e.Fix != "" {
			fixed++
		} else {
			open++
		}
	}
	lim := limits{instructions: len(l.Instructions), attachments: len(l.Attachments), tests: min(len(l.Tests), 3), commands: len(distinctCommands(l.Commands)), refs: len(l.Refs), fixed: fixed, open: open,
		task: min(len(l.Task), max(maxTokens/2, minTask)), approvals: len(l.Approvals), inFlight: len(l.InFlight)}
	if l.Plan != nil {
		lim.plan = len(l.Plan.Items)
	}
	lim.state = withState
	for i, op := range opOrder {
		lim.files[i] = len(byOp[op])
	}
	// A bullet that a smaller rendering leaves as it was is counted once.
	counted := map[string]int{}
	cost := func(r Rendered) int {
		n := 0
		for _, b := range r.All() {
			c, ok := counted[b]
			if !ok {
				c = count("- "+b+"\n") + 1
				counted[b] = c
			}
			n += c
		}
		return n
	}
	out := l.render(byOp, lim)
	for out.Tokens = cost(out); out.Tokens > maxTokens; out.Tokens = cost(out) {
		if !lim.shrink() {
			return Rendered{}
		}
		out = l.render(byOp, lim)
	}
	return out
}

// shrink shows less of one list; false when nothing is left to cut.
func (lim *limits) shrink() bool {
	half := func(n *int) bool {
		if *n == 0 {
			return false
		}
		*n /= 2
		return true
	}
	// A long list loses a quarter at a time, so what is left of the
	// budget is not wasted.
	quarter := func(n *int) bool {
		if *n < 8 {
			return half(n)
		}
		*n -= *n / 4
		return true
	}
	// A list cut down to a floor first, the rest of it later.
	downTo := func(n *int, floor int) bool {
		if *n <= floor {
			return false
		}
		*n = max(*n-max(*n/4, 1), floor)
		return true
	}
	switch {
	case lim.approvals > 1 && half(&lim.approvals), lim.task > minTask && half(&lim.task), downTo(&lim.commands, minCommands), half(&lim.tests), half(&lim.fixed),
		lim.open > 2 && half(&lim.open), quarter(&lim.commands), lim.attachments > 4 && half(&lim.attachments),
		half(&lim.files[3]), lim.inFlight > 2 && half(&lim.inFlight), lim.refs > 8 && quarter(&lim.refs), half(&lim.files[2]), half(&lim.files[1]), half(&lim.files[0]), half(&lim.open), half(&lim.attachments),
		half(&lim.task), half(&lim.approvals), quarter(&lim.refs), half(&lim.inFlight), half(&lim.plan), half(&lim.instructions):
		return true
	case lim.state:
		// Last, the state's own bullets (the file being edited, the last
		// command, the count of open errors) go, so a small budget still
		// renders what else fits.
		lim.state = false
		return true
	}
	return false
}

// minCommands is what the commands' list keeps while the fixed errors and
// test runs are cut: the last commands say where the agent was (the list
// went first, all of it, before: at 4k a session of read-only exploration
// lost every command to three fixed errors' long lines).
const minCommands = 8

// The longest an error's line shows: fixed, and still open.
const (
	fixedErrorChars = 80
	openErrorChars  = 160
)

// byOp groups the file paths by their strongest operation (edited, created,
// deleted, read), oldest first.
func (l *Ledger) byOp() map[string][]string {
	out := map[string][]string{}
	for _, f := range l.Files {
		op := OpRead
		for _, o := range opOrder {
			if containsOp(f.Ops, o) {
				op = o
				break
			}
		}
		out[op] = append(out[op], f.Path)
	}
	return out
}

func containsOp(ops []string, op string) bool {
	for _, o := range ops {
		if o == op {
			return true
		}
	}
	return false
}

func (l *Ledger) render(byOp map[string][]string, lim limits) Rendered {
	var r Rendered
	if lim.state {
		r.State = l.renderState(lim)
	}
	if n := lim.instructions; n > 0 {
		for _, in := range l.Instructions[len(l.Instructions)-n:] {
			if by := l.supersededBy(in); by != "" {
				in = fmt.Sprintf("%q (superseded by %q)", in, by)
			}
			r.Instructions = append(r.Instructions, in)
		}
	}
	prefix := commonDir(l.Files)
	if prefix != "" {
		r.Files = append(r.Files, "workspace: "+prefix)
	}
	for i, op := range opOrder {
		if b := list(op, byOp[op], lim.files[i], prefix); b != "" {
			r.Files = append(r.Files, b)
		}
	}
	if n := lim.tests; n > 0 {
		var parts []string
		for _, t := range l.Tests[len(l.Tests)-n:] {
			parts = append(parts, fmt.Sprintf("`%s`: %s (%s)", short(t.Cmd, 60), t.Detail, t.Outcome))
		}
		r.Files = append(r.Files, "tests: "+strings.Join(parts, "; "))
	}
	if n := lim.commands; n > 0 {
		r.Files = append(r.Files, l.commandsBullet(n))
	}
	if n := lim.attachments; n > 0 {
		r.Files = append(r.Files, l.attachmentsBullet(n))
	}
	if n := lim.refs; n > 0 {
		r.Files = append(r.Files, "ids: "+strings.Join(l.Refs[len(l.Refs)-n:], ", "))
	}
	r.Errors = l.errorBullets(lim)
	return r
}

// commandsBullet shows the newest n commands, each once (where it ran
// last), oldest first; an exit status other than 0 is shown.
func (l *Ledger) commandsBullet(n int) string {
	cmds := distinctCommands(l.Commands)
	var parts []string
	for _, c := range cmds[len(cmds)-min(n, len(cmds)):] {
		s := "`" + strings.ReplaceAll(short(c.Cmd, 60), "`", "'") + "`"
		if c.Exit != nil && *c.Exit != 0 {
			s += fmt.Sprintf(" (exit %d)", *c.Exit)
		}
		parts = append(parts, s)
	}
	b := "commands: " + strings.Join(parts, "; ")
	if left := len(cmds) - len(parts); left > 0 {
		b += fmt.Sprintf(" (and %d older)", left)
	}
	return b
}

// attachmentsBullet shows the newest n attachments.
func (l *Ledger) attachmentsBullet(n int) string {
	var parts []string
	for _, a := range l.Attachments[len(l.Attachments)-n:] {
		s := a.Placeholder + " from " + a.Role
		if a.Seq > 0 {
			s += fmt.Sprintf(" (message %d)", a.Seq)
		}
		parts = append(parts, s)
	}
	b := "attachments: " + strings.Join(parts, ", ")
	if left := len(l.Attachments) - n; left > 0 {
		b += fmt.Sprintf(" (and %d older)", left)
	}
	return b
}

// errorBullets are the newest lim.fixed fixed errors and lim.open open
// ones, oldest first.
func (l *Ledger) errorBullets(lim limits) []string {
	fixed, open := 0, 0
	var errs []string
	// Newest first when counting, so a cut list keeps the latest.
	for i := len(l.Errors) - 1; i >= 0; i-- {
		e := l.Errors[i]
		if e.Fix != "" {
			if fixed >= lim.fixed {
				continue
			}
			fixed++
		} else {
			if open >= lim.open {
				continue
			}
			open++
		}
		// An error's line, at most fixedErrorChars when fixed (what it
		// was is enough to know it is not to be chased again), at most
		// openErrorChars when still open.
		n := openErrorChars
		if e.Fix != "" {
			n = fixedErrorChars
		}
		b := "`" + strings.ReplaceAll(short(e.Error, n), "`", "'") + "`"
		if e.From != "" {
			b += " from `" + short(e.From, 60) + "`"
		}
		if e.Fix != "" {
			b += ": " + e.Fix
		} else {
			b += ": not fixed yet"
		}
		errs = append(errs, b)
	}
	var out []string
	for i := len(errs) - 1; i >= 0; i-- {
		out = append(out, errs[i])
	}
	return out
}

// list writes "op: a, b, c" with the newest n paths, relative to prefix.
func list(op string, paths []string, n int, prefix string) string {
	if n <= 0 || len(paths) == 0 {
		if len(paths) > 0 {
			return fmt.Sprintf("%s: %d files", op, len(paths))
		}
		return ""
	}
	shown := paths[len(paths)-n:]
	rel := make([]string, len(shown))
	for i, p := range shown {
		rel[i] = strings.TrimPrefix(p, prefix)
	}
	b := op + ": " + strings.Join(rel, ", ")
	if left := len(paths) - n; left > 0 {
		b += fmt.Sprintf(" (and %d older)", left)
	}
	return b
}

// commonDir is the directory (with its trailing slash) every absolute path
// shares, when there are at least two paths and it is at least two levels
// deep; else "".
func commonDir(files []File) string {
	if len(files) < 2 {
		return ""
	}
	prefix, seen := "", 0
	for _, f := range files {
		if !strings.HasPrefix(f.Path, "/") {
			continue
		}
		dir := f.Path[:strings.LastIndexByte(f.Path, '/')+1]
		if seen++; seen == 1 {
			prefix = dir
			continue
		}
		for !strings.HasPrefix(dir, prefix) {
			prefix = prefix[:strings.LastIndexByte(strings.TrimSuffix(prefix, "/"), '/')+1]
		}
	}
	if seen < 2 || strings.Count(prefix, "/") < 3 {
		return ""
	}
	return prefix
}

// short clips s to n bytes (at a rune boundary) with an ellipsis.
func short(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// TaskPrefix opens the working state's task bullet.
const TaskPrefix = "task, as the user gave it: "

// minTask is the fewest characters of the task a rendering shows before
// it drops the task.
const minTask = 160

// renderState writes the working state: the task, the plan with each
// item's status, the approvals given or refused, what is in flight, the
// file being edited, the last command and its outcome, the errors open.
func (l *Ledger) renderState(lim limits) []string {
	var out []string
	if l.Task != "" && lim.task > 0 {
		out = append(out, TaskPrefix+oneLine(short(l.Task, lim.task)))
	}
	if p := l.Plan; p != nil && len(p.Items) > 0 {
		out = append(out, p.bullets(lim.plan)...)
	}
	if n := min(lim.approvals, len(l.Approvals)); n > 0 {
		for _, a := range l.Approvals[len(l.Approvals)-n:] {
			verb := "approved"
			if !a.Approved {
				verb = "declined"
			}
			b := fmt.Sprintf("%s by the user: %q (answer: %q)", verb, a.Asked, a.Answer)
			if a.Seq > 0 {
				b += fmt.Sprintf(", message %d", a.Seq)
			}
			out = append(out, b)
		}
	}
	if left := len(l.InFlight) - lim.inFlight; left > 0 && lim.inFlight > 0 {
		out = append(out, fmt.Sprintf("(%d earlier calls in flight not shown)", left))
	}
	for _, p := range l.InFlight[len(l.InFlight)-min(lim.inFlight, len(l.InFlight)):] {
		out = append(out, p.bullet())
	}
	if l.Editing != "" {
		out = append(out, "editing: "+l.Editing)
	}
	if len(l.Commands) > 0 {
		c := l.Commands[len(l.Commands)-1]
		b := "last command: `" + strings.ReplaceAll(short(reHeredoc.ReplaceAllString(c.Cmd, "$1"), 60), "`", "'") + "`"
		if c.Exit != nil {
			b += fmt.Sprintf(" (exit %d)", *c.Exit)
		}
		out = append(out, b)
	}
	open, last := 0, ""
	for _, e := range l.Errors {
		if e.Fix == "" {
			open++
			last = e.Error
		}
	}
	if open > 0 {
		out = append(out, fmt.Sprintf("open errors: %d, the last `%s`", open, strings.ReplaceAll(short(last, 80), "`", "'")))
	}
	return out
}

// bullets are the plan's head (its source, when it was, and its counts by
// status when tracked) and its newest n items.
func (p *Plan) bullets(n int) []string {
	counts := map[string]int{}
	for _, it := range p.Items {
		counts[it.Status]++
	}
	head := "plan"
	switch {
	case p.From == planStated:
		head += " (as stated, not tracked)"
	case p.From != "":
		head += " (" + p.From + ")"
	}
	if p.Seq > 0 {
		head += fmt.Sprintf(", as of message %d", p.Seq)
	}
	if p.tracked() {
		var parts []string
		for _, st := range []string{PlanDone, PlanInProgress, PlanPending, PlanCancelled} {
			if counts[st] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", counts[st], st))
			}
		}
		head += ": " + strings.Join(parts, ", ") + "; done items are finished, not next steps"
	}
	out := []string{head}
	shown := p.Items[len(p.Items)-min(n, len(p.Items)):]
	if left := len(p.Items) - len(shown); left > 0 {
		out = append(out, fmt.Sprintf("(%d earlier plan items not shown)", left))
	}
	for _, it := range shown {
		out = append(out, "["+it.Status+"] "+it.Text)
	}
	return out
}

// bullet is a call in flight: a tool's awaited result, or a sub-agent
// running.
func (p Pending) bullet() string {
	b := "awaiting the result of " + p.Name
	if p.Agent {
		b = "sub-agent running: " + p.Name
	}
	if p.What != "" {
		b += ": " + strings.ReplaceAll(p.What, "`", "'")
	}
	if p.ID != "" {
		b += " (call " + p.ID + ")"
	}
	return b
}

// distinctCommands is cmds with each command once, where it ran last; a
// command that writes a here-document shows up to its marker (the file it
// writes, not the text).
func distinctCommands(cmds []Command) []Command {
	shown := make([]string, len(cmds))
	last := make(map[string]int, len(cmds))
	for i, c := range cmds {
		shown[i] = reHeredoc.ReplaceAllString(c.Cmd, "$1")
		last[shown[i]] = i
	}
	out := make([]Command, 0, len(last))
	for i, c := range cmds {
		if last[shown[i]] == i {
			c.Cmd = shown[i]
			out = append(out, c)
		}
	}
	return out
}

// reHeredoc is a command that writes a here-document: $1 is the command
// up to its marker and a redirection right after it (cat <<'EOF' > f.py),
// without the text.
var reHeredoc = regexp.MustCompile(`^(.*?<<-?\s*['"]?\w+['"]?(?:\s*>{1,2}\s*[^\s;&|]+)?)(?:\s.*)?$`)
