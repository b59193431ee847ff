package pipeline

import (
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
)

// ledgerMessages is what the ledger reads of msgs (a chat that writes its
// speakers into the text read as if they were named).
func ledgerMessages(msgs []session.Message) []ledger.Message {
	msgs = session.WithSpeakerNames(msgs)
	out := make([]ledger.Message, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		lm := ledger.Message{Role: string(m.Role), Text: m.Content.Text, Seq: m.Seq, ToolCallID: m.ToolCallID, Name: m.Name, Summary: m.IsCompaction}
		for _, tc := range m.ToolCalls {
			lm.ToolCalls = append(lm.ToolCalls, ledger.Call{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		out[i] = lm
	}
	return out
}

// ledgerOf is the ledger of what the summary will cover: the summary in
// force's ledger (when the summary is extended incrementally) followed by
// input's. The task is the first user message of a range that starts the
// session; one pinned (keep_first_user_message) is in the context as it
// was, and a later range's first user message is not the task.
//
// next, when not nil, is the message after input (the raw tail's first):
// the ledger reads it only as the output of a text action that ends
// input, so an agent's fenced command summarised apart from its output
// (mini-swe-agent's action and observation are an assistant and a user
// message, which the cut may part) is still recorded with what it did.
func ledgerOf(prev *session.Message, input []session.Message, next *session.Message, incremental, taskPinned bool) *ledger.Ledger {
	msgs := ledgerMessages(input)
	if next != nil && len(msgs) > 0 {
		la := ledgerMessages([]session.Message{*next})[0]
		la.Lookahead = true
		msgs = append(msgs, la)
	}
	cur := ledger.Extract(msgs)
	if taskPinned {
		cur.Task = ""
	}
	if incremental && prev != nil && prev.Compaction != nil {
		cur.Task = ""
		return ledger.Merge(prev.Compaction.Ledger, cur)
	}
	return cur
}

// after is the message of msgs that follows the last of input (nil when
// none does).
func after(msgs, input []session.Message) *session.Message {
	if len(input) == 0 {
		return nil
	}
	last := input[len(input)-1].Seq
	for i := range msgs {
		if msgs[i].Seq > last && !msgs[i].IsCompaction {
			return &msgs[i]
		}
	}
	return nil
}

// asStored returns msgs as the store holds them (from stored, by seq and
// id): a tool result cleared from the context is still read whole by the
// ledger (clamped as the summariser's input is, head and tail), so an
// error it reported is not lost to the clearing before the summary
// covers it.
func asStored(msgs, stored []session.Message) []session.Message {
	bySeq := make(map[int64]int, len(stored))
	for i := range stored {
		bySeq[stored[i].Seq] = i
	}
	out, copied := msgs, false
	for i := range msgs {
		j, ok := bySeq[msgs[i].Seq]
		if !ok || stored[j].ID != msgs[i].ID || sameForModel(&stored[j], &msgs[i]) {
			continue
		}
		if !copied {
			out, copied = slices.Clone(msgs), true
		}
		out[i] = stored[j]
	}
	return out
}

// pinsUser reports whether the pinned messages hold a user message (the
// task, kept as it was).
func pinsUser(pinned []session.Message) bool {
	for i := range pinned {
		if pinned[i].Role == session.RoleUser {
			return true
		}
	}
	return false
}

// withoutBullets returns s without the given bullets (the ledger an
// earlier compaction rendered into it: the new one replaces it).
func withoutBullets(s *summary.Summary, bullets []string) *summary.Summary {
	if len(bullets) == 0 {
		return s
	}
	drop := make(map[string]bool, len(bullets))
	for _, b := range bullets {
		drop[strings.TrimSpace(strings.ReplaceAll(b, "\n", " "))] = true
	}
	out := summary.New()
	for _, h := range summary.All {
		for _, b := range s.Sections[h] {
			if !drop[b] {
				out.Add(h, b)
			}
		}
	}
	return out
}

// withLedger puts the ledger's bullets first in their sections of text,
// after removing stale ones (an earlier ledger's), and keeps the
// summariser's bullets after them; the working state is the ledger's
// alone. A summariser's open task that the plan says is done is dropped,
// and so is its verbatim copy of an instruction the ledger shows
// superseded (the rest of its bullet stays). Within maxTokens: the
// summariser's bullets go before the ledger's.
func withLedger(c *tokens.Counter, text string, l *ledger.Ledger, r ledger.Rendered, stale []string, maxTokens int) string {
	if len(r.All())+len(stale) == 0 && !strings.Contains(text, summary.State) {
		return text
	}
	parsed, _ := summary.Parse(text)
	parsed = withoutBullets(parsed, stale)
	out := summary.New()
	for _, b := range r.State {
		out.Add(summary.State, b)
	}
	said := saidBy(l, r)
	if l != nil && len(l.Superseded) > 0 {
		parsed = withoutSuperseded(parsed, l.Superseded)
	}
	for _, h := range summary.Headings {
		switch h {
		case summary.Instructions:
			// The summariser's (verified) bullets first, then the user's
			// instructions it did not quote.
			for _, b := range parsed.Sections[h] {
				out.Add(h, b)
			}
			for _, in := range r.Instructions {
				if !quoted(out.Sections[h], in) {
					out.Add(h, in)
				}
			}
			continue
		case summary.Files:
			for _, b := range r.Files {
				out.Add(h, b)
			}
		case summary.Errors:
			for _, b := range r.Errors {
				out.Add(h, b)
			}
		case summary.OpenTasks:
			for _, b := range parsed.Sections[h] {
				if !l.Done(b) {
					out.Add(h, b)
				}
			}
			continue
		}
		for _, b := range parsed.Sections[h] {
			if !said.says(h, b) {
				out.Add(h, b)
			}
		}
	}
	merged := out.Render()
	if c.Count(merged) <= maxTokens {
		return merged
	}
	return fitSummaryKeeping(c, merged, maxTokens, r.All())
}

// withoutSuperseded is s with every instruction a later one superseded
// taken out of the summariser's bullets (a bullet that quoted it among
// other sentences keeps the others; one left with nothing is dropped):
// stated as it was written, it reads as current.
func withoutSuperseded(s *summary.Summary, sup []ledger.Supersession) *summary.Summary {
	out := summary.New()
	for _, h := range summary.All {
		for _, b := range s.Sections[h] {
			for _, x := range sup {
				b = cutFold(b, x.Old)
			}
			if rest := strings.TrimSpace(reSpeaker.ReplaceAllString(b, "")); strings.Trim(rest, ` "'.,;:-`) != "" {
				out.Add(h, b)
			}
		}
	}
	return out
}

// cutFold is s without each occurrence of sub, case aside, and the
// spaces it leaves doubled.
func cutFold(s, sub string) string {
	if sub == "" {
		return s
	}
	for {
		i := strings.Index(strings.ToLower(s), strings.ToLower(sub))
		if i < 0 || len(strings.ToLower(s)) != len(s) {
			return s
		}
		s = strings.TrimSpace(s[:i]) + " " + strings.TrimSpace(s[i+len(sub):])
		s = strings.TrimSpace(s)
	}
}

// Ledger returns the artifact ledger of msgs (what a compaction of them
// stores and renders).
func Ledger(msgs []session.Message) *ledger.Ledger {
	return ledger.Extract(ledgerMessages(msgs))
}

// saidByLedger is what the ledger's bullets say, for telling whether a
// summariser's bullet says it again.
type saidByLedger struct {
	l       *ledger.Ledger
	bullets []string // normalised
	task    map[string]bool
}

func saidBy(l *ledger.Ledger, r ledger.Rendered) saidByLedger {
	s := saidByLedger{l: l}
	for _, b := range r.All() {
		s.bullets = append(s.bullets, normalise(b))
	}
	if l != nil && l.Task != "" && len(r.State) > 0 && strings.HasPrefix(r.State[0], ledger.TaskPrefix) {
		s.task = contentWords(r.State[0][len(ledger.TaskPrefix):])
	}
	return s
}

// says reports whether a summariser's bullet under heading h says what
// the ledger's bullets say: its words within one of them; a goal that
// restates the task the working state quotes (three in four of its words
// the task's); a raw tool call (an offline summariser's "called Read
// {...}") that the ledger records as a file or a command.
func (s saidByLedger) says(h, b string) bool {
	if s.l == nil {
		return false
	}
	n := normalise(b)
	for _, lb := range s.bullets {
		if len(n) >= 12 && strings.Contains(lb, n) {
			return true
		}
	}
	if h == summary.Goal && s.task != nil {
		words := contentWords(b)
		in := 0
		for w := range words {
			if s.task[w] {
				in++
			}
		}
		if len(words) > 0 && 4*in >= 3*len(words) {
			return true
		}
	}
	if m := reCallEcho.FindStringSubmatch(b); m != nil {
		return ledger.Records(m[1], m[2])
	}
	return false
}

// reCallEcho is a bullet that repeats a tool call: "called NAME ARGS",
// after a speaker or not.
var reCallEcho = regexp.MustCompile(`^(?:\w+: )?called ([\w.:-]+) (.*)$`)

// contentWords are s's words of four letters or more, lower-cased.
func contentWords(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		if len(w) >= 4 {
			out[w] = true
		}
	}
	return out
}

// quoted reports whether one of bullets already holds instruction
// (whitespace, quotes and case aside).
func quoted(bullets []string, instruction string) bool {
	n := normalise(instruction)
	for _, b := range bullets {
		if strings.Contains(normalise(b), n) {
			return true
		}
	}
	return false
}

// withoutQuotedTask drops the task from the working state r when the
// summariser's goal already quotes it (its first 100 characters,
// whitespace, quotes and case aside): the same words twice cost a small
// window the progress a compaction must make.
func withoutQuotedTask(text string, l *ledger.Ledger, r ledger.Rendered) ledger.Rendered {
	if l == nil || l.Task == "" || len(r.State) == 0 || !strings.HasPrefix(r.State[0], ledger.TaskPrefix) {
		return r
	}
	parsed, _ := summary.Parse(text)
	task := normalise(l.Task[:min(len(l.Task), 100)])
	for _, b := range parsed.Sections[summary.Goal] {
		if strings.Contains(normalise(b), task) {
			r.State = r.State[1:]
			return r
		}
	}
	return r
}
