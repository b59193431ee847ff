package ledger

import (
	"fmt"
	"strings"
)

// Rendered is a ledger written as summary bullets.
type Rendered struct {
	Instructions []string // for "User instructions": the user's words
	Files        []string // for "Files and artifacts"
	Errors       []string // for "Errors and fixes"
	// Tokens is what the bullets cost in a summary: count("- "+b+"\n")+1
	// each.
	Tokens int
}

// All returns every bullet.
func (r Rendered) All() []string {
	return append(append(append([]string(nil), r.Instructions...), r.Files...), r.Errors...)
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
}

// Render writes the ledger as bullets whose lines, counted with count
// ("- " + bullet + "\n" each), total at most maxTokens. When the whole
// ledger is over, it shows less, in this order: identifiers, commands, test
// runs, fixed errors, open errors down to two, attachments down to four,
// files only read, then the oldest files changed, the last open errors and
// attachments, and the oldest instructions last; a list of files cut short
// says how many it leaves out.
func Render(l *Ledger, count func(string) int, maxTokens int) Rendered {
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
	lim := limits{instructions: len(l.Instructions), attachments: len(l.Attachments), tests: min(len(l.Tests), 3), commands: len(l.Commands), refs: len(l.Refs), fixed: fixed, open: open}
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
	switch {
	case half(&lim.refs), half(&lim.commands), half(&lim.tests), half(&lim.fixed), lim.open > 2 && half(&lim.open), lim.attachments > 4 && half(&lim.attachments),
		half(&lim.files[3]), half(&lim.files[2]), half(&lim.files[1]), half(&lim.files[0]), half(&lim.open), half(&lim.attachments), half(&lim.instructions):
		return true
	}
	return false
}

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
	if n := lim.instructions; n > 0 {
		r.Instructions = append(r.Instructions, l.Instructions[len(l.Instructions)-n:]...)
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
		var parts []string
		for _, c := range l.Commands[len(l.Commands)-n:] {
			s := "`" + short(c.Cmd, 80) + "`"
			if c.Exit != nil {
				s += fmt.Sprintf(" (exit %d)", *c.Exit)
			}
			parts = append(parts, s)
		}
		r.Files = append(r.Files, "commands: "+strings.Join(parts, "; "))
	}
	if n := lim.attachments; n > 0 {
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
		r.Files = append(r.Files, b)
	}
	if n := lim.refs; n > 0 {
		r.Files = append(r.Files, "ids: "+strings.Join(l.Refs[len(l.Refs)-n:], ", "))
	}
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
		b := "`" + strings.ReplaceAll(e.Error, "`", "'") + "`"
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
	for i := len(errs) - 1; i >= 0; i-- {
		r.Errors = append(r.Errors, errs[i])
	}
	return r
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
