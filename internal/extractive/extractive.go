// Package extractive is the offline summariser: deterministic, no model, no
// network. It picks the sentences that carry the most facts (numbers, dates,
// names, identifiers, paths, decisions, errors, the user's instructions) by
// greedy budgeted coverage — each pick maximises the new information per
// token — and writes them, verbatim and in order, under the template's
// headings, within the token budget.
package extractive

import (
	"container/heap"
	"context"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/compactor/compactor/internal/ledger"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tokens"
)

// Model is the model name the extractive summariser reports.
const Model = "extractive"

var (
	_ pipeline.Summarizer     = (*Summarizer)(nil)
	_ pipeline.MessagesReader = (*Summarizer)(nil)
	_ pipeline.Rereader       = (*Summarizer)(nil)
)

// ReadsMessagesOnly implements pipeline.MessagesReader: the extractive
// summariser works on the messages, never on a rendered prompt.
func (s *Summarizer) ReadsMessagesOnly(pipeline.SummaryRequest) bool { return true }

// RereadsAll implements pipeline.Rereader: summarising everything again
// costs no model call, and selecting from the original messages keeps more
// than selecting again from a summary of them.
func (s *Summarizer) RereadsAll(pipeline.SummaryRequest) bool { return true }

// Summarizer is the extractive summariser. It is safe for concurrent use.
type Summarizer struct {
	counter *tokens.Counter
}

// New returns an extractive summariser that measures its output with
// counter (the session model's encoding).
func New(counter *tokens.Counter) *Summarizer { return &Summarizer{counter: counter} }

// maxSentenceTokens clips a single extracted sentence; an instruction is
// kept whole up to maxInstructionTokens.
const (
	maxSentenceTokens    = 60
	maxInstructionTokens = 200
)

// featureWeight scales the information a sentence carries beyond its words
// (numbers, dates, names, identifiers, paths) against word coverage.
const featureWeight = 3

// coveredWeight is what a word already in the summary still adds.
var coveredWeight = 0.3

// maxToolLines bounds how many lines one tool output may contribute before
// selection, so one huge log cannot crowd out the conversation.
const maxToolLines = 40

// Summarize implements pipeline.Summarizer. It reads req.Messages (the
// chunk, or the summaries to merge) and never fails on well-formed input.
func (s *Summarizer) Summarize(ctx context.Context, req pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	if err := ctx.Err(); err != nil {
		return pipeline.SummaryResponse{}, err
	}
	var units []*unit
	switch req.Task {
	case pipeline.TaskMerge, pipeline.TaskCondense:
		units = fromSummaries(req.Messages)
	default:
		units = fromMessages(req.Messages)
	}
	if len(units) == 0 { // nothing sentence-like: keep the raw text
		for i := range req.Messages {
			if t := strings.TrimSpace(req.Messages[i].Content.Text); t != "" {
				units = append(units, &unit{section: summary.Facts, text: clipUTF8(t, 300), msg: i, order: i, damp: 1})
			}
		}
	}
	sc := s
	if req.Encoding != "" && req.Encoding != s.counter.Encoding() {
		// Measure in the caller's encoding, so the budget is the caller's.
		if c, err := tokens.ForEncoding(req.Encoding); err == nil {
			sc = &Summarizer{counter: c}
		}
	}
	text, n := sc.compose(units, req.MaxTokens, req.Focus)
	if summary.Validate(text) != nil && len(units) > 0 {
		// No bullet fits whole (a budget the headings nearly fill): the
		// unit with the most content words, clipped to what they leave,
		// rather than a summary with nothing in it.
		best := units[0]
		for _, u := range units[1:] {
			if len(contentWords(u.text)) > len(contentWords(best.text)) {
				best = u
			}
		}
		for room := min(req.MaxTokens-n-4, maxSentenceTokens-2); room >= minClipTokens; room = room * 3 / 4 {
			u := *best
			u.text, u.cost = sc.counter.Truncate(u.text, room)+"…", 0
			if t, m := sc.compose([]*unit{&u}, req.MaxTokens, req.Focus); summary.Validate(t) == nil {
				text, n = t, m
				break
			}
		}
	}
	return pipeline.SummaryResponse{Text: text, Model: Model, OutputTokens: n, Encoding: sc.counter.Encoding()}, nil
}

// minClipTokens is the least a clipped bullet holds: under it, no bullet
// says anything.
const minClipTokens = 8

// unit is one candidate bullet.
type unit struct {
	section string
	text    string
	speaker string // prefix of text ("name: "), "" when none
	raw     string // a conversation's clause as said, before tighten
	msg     int    // index of the source message; -1 for summary bullets
	order   int
	words   []string // distinct content words
	bonus   float64  // information not measured by word coverage
	damp    float64  // multiplier for small talk
	must    bool     // taken first, budget allowing (goal, instructions)
	cost    int      // exact tokens of its bullet line, 0 until counted
	// date is when it was said (from a message's time stamp, or a dated
	// bullet); dated units render grouped by date.
	date time.Time
}

// reStructured is a line an assistant model writes and a person chatting
// does not: a list item, a heading, a code fence, a table row.
var reStructured = regexp.MustCompile(`(?m)^\s*([-*•] |#{1,6} |\d{1,2}[.)] |` + "```" + `|\|)`)

// casualChat reports whether msgs read as a chat between people stored
// without names: no tools and no system prompt, at least eight turns,
// short replies (a median under 50 words) that are almost never
// structured as a model writes (lists, headings, code). Such a chat is
// summarised as one between people (what each said, by date), not as a
// task given to an assistant.
func casualChat(msgs []session.Message) bool {
	var words []int
	structured, turns := 0, 0
	for i := range msgs {
		m := &msgs[i]
		switch {
		case m.IsCompaction:
			continue
		case m.Role == session.RoleSystem || m.Role == session.RoleTool || len(m.ToolCalls) > 0:
			return false
		case m.Role == session.RoleAssistant:
			words = append(words, len(strings.Fields(m.Content.Text)))
			if reStructured.MatchString(m.Content.Text) {
				structured++
			}
		}
		turns++
	}
	if turns < 8 || len(words) < 4 || structured*10 > len(words) {
		return false
	}
	slices.Sort(words)
	return words[len(words)/2] < 50
}

func (u *unit) estCost() int {
	if u.cost > 0 {
		return u.cost
	}
	return len(u.text)/4 + 3
}

// fromMessages turns a chunk's messages into candidate sentences. An agent
// session (tool calls) and a conversation with an assistant get the
// template's sections; a conversation between people (both sides named, no
// tools) gets sections that fit it: who talks (Goal), what they said, by
// date, with relative times resolved (Facts), their plans (Decisions).
func fromMessages(msgs []session.Message) []*unit {
	msgs = session.WithSpeakerNames(msgs)
	b := &units{curMsg: -1}
	var names []string
	b.people, names, b.lastUser = shapeOf(msgs)
	if b.people {
		sort.Strings(names) // the same bullet whichever speaks first in this part
		who := strings.Join(names, " and ")
		if len(names) < 2 {
			who = "two people (as user and assistant)"
		}
		u := b.add(summary.Goal, "", "Conversation between "+who, 0)
		u.must = true
		b.goalDone = true
		// A participant's name after a comma at a sentence's end is the
		// other being addressed ("Congrats, Sam!"): it tells nothing.
		quoted := make([]string, len(names))
		for i, n := range names {
			quoted[i] = regexp.QuoteMeta(n)
		}
		b.vocative = regexp.MustCompile(`,\s*(?:` + strings.Join(quoted, "|") + `)\s*([.!?…]+|$)`)
	}
	for i := range msgs {
		b.message(&msgs[i], i)
	}
	return b.list
}

// units builds a part's units, message by message.
type units struct {
	list          []*unit
	order, curMsg int
	curDate       time.Time
	// people: a conversation between people (no tools, the assistant
	// named or the chat casual); vocative matches a participant addressed
	// by name.
	people   bool
	vocative *regexp.Regexp
	goalDone bool
	lastUser int // the index of the last user message
}

// shapeOf says whether msgs are a conversation between people, the names
// of up to four speakers, and the index of the last user message.
func shapeOf(msgs []session.Message) (people bool, names []string, lastUser int) {
	agent, namedAssistant := false, false
	lastUser = -1
	for i := range msgs {
		m := &msgs[i]
		if len(m.ToolCalls) > 0 || m.Role == session.RoleTool {
			agent = true
		}
		if m.Role == session.RoleAssistant && m.Name != "" && !m.IsCompaction {
			namedAssistant = true
		}
		if m.Name != "" && !m.IsCompaction && (m.Role == session.RoleUser || m.Role == session.RoleAssistant) && !slices.Contains(names, m.Name) && len(names) < 4 {
			names = append(names, m.Name)
		}
		if m.Role == session.RoleUser && !m.IsCompaction {
			lastUser = i
		}
	}
	return !agent && (namedAssistant && len(names) >= 2 || casualChat(msgs)), names, lastUser
}

// add adds a unit of text in section, said by speaker, with a bonus.
func (b *units) add(section, speaker, text string, extra float64) *unit {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil
	}
	prefix := ""
	if speaker != "" {
		prefix = speaker + ": "
	}
	u := &unit{section: section, text: prefix + text, speaker: prefix, msg: b.curMsg, order: b.order, bonus: extra, damp: 1}
	b.order++
	b.list = append(b.list, u)
	return u
}

// message adds the units of message i.
func (b *units) message(m *session.Message, i int) {
	b.curMsg = i
	speaker := m.Name
	if speaker == "" {
		speaker = string(m.Role)
	}
	if m.IsCompaction { // an earlier summary inside the chunk: reuse its bullets
		for _, u := range fromSummaries([]session.Message{*m}) {
			u.order, u.msg = b.order, -1
			b.order++
			b.list = append(b.list, u)
		}
		return
	}
	text := m.Content.Text
	if d, rest, ok := stamp(text); ok {
		b.curDate, text = d, rest
	}
	switch m.Role {
	case session.RoleTool:
		if strings.HasPrefix(text, pipeline.ClearedPrefix) {
			return // a placeholder: the call above it says what ran
		}
		for _, line := range toolLines(text) {
			b.add(classifyTool(line), "tool", line, 0)
		}
		return
	case session.RoleSystem:
		for _, sent := range sentences(text) {
			b.add(summary.Facts, "system", sent, 0)
		}
		return
	}
	for _, tc := range m.ToolCalls {
		args := tc.Function.Arguments
		if len(args) > 240 {
			args = clipUTF8(args, 240) + "…"
		}
		b.add(summary.Facts, speaker, "called "+tc.Function.Name+" "+args, 1)
	}
	if b.people {
		// A shared photo's caption is a fact of its own, not the end of
		// the sentence before it.
		text = strings.ReplaceAll(text, " [shares a photo:", "\n[shares a photo:")
	}
	for _, sent := range sentences(text) {
		if b.people {
			b.said(speaker, sent)
		} else {
			b.sentence(m, i, speaker, sent)
		}
	}
}

// said adds the clauses of a sentence of a conversation between people.
func (b *units) said(speaker, sent string) {
	for _, said := range clauses(resolve(sent, b.curDate)) {
		cl := tighten(said, b.vocative)
		// The clause goes on its date's line: a time counted from that
		// date needs no second copy of it ("the Friday before").
		cl = strings.ReplaceAll(cl, " before "+day(b.curDate), " before")
		cl = strings.ReplaceAll(cl, " after "+day(b.curDate), " after")
		if cl == "" {
			continue
		}
		sec := summary.Facts
		if reDecide.MatchString(said) || rePlan.MatchString(said) {
			sec = summary.Decisions
		}
		u := b.add(sec, speaker, cl, 0)
		u.date, u.raw = b.curDate, said
		if strings.HasSuffix(sent, "?") {
			u.damp = 0.4 // a question to the other asks more than it tells
		}
	}
}

// sentence adds a sentence of message i (m) of an agent's or an
// assistant's session, in its section: the user's first goal, an
// instruction kept whatever the budget, the last user message's question
// or request an open task.
func (b *units) sentence(m *session.Message, i int, speaker, sent string) {
	sec := classify(m.Role, sent)
	u := b.add(sec, speaker, resolve(sent, b.curDate), 0)
	if u == nil {
		return
	}
	if m.Role == session.RoleUser && !b.goalDone && sec != summary.Instructions && isGoal(sent) {
		u.section, u.must, b.goalDone = summary.Goal, true, true
		return
	}
	if sec == summary.Instructions {
		u.must = true
	}
	if i == b.lastUser && (strings.HasSuffix(sent, "?") || isRequest(sent)) && sec != summary.Instructions {
		u.section = summary.OpenTasks
		u.bonus += 2
	}
}

var (
	reOpener   = regexp.MustCompile(`(?i)^(?:(?:yep|yeah|yes|yup|wow|whoa|oh|ooh|hey|hi|haha|lol|well|so|okay|ok|btw|by the way|honestly|actually|anyway|anyways|totally|omg|aw+|hmm+|man|dude|guess what|you know what|speaking of which|oh my|oh no)\b[\s,!.:?…-]*)+`)
	reVocative = regexp.MustCompile(`^[A-Z][a-z]+[,!]+\s+`)
	reFiller   = regexp.MustCompile(`(?i)\b(really|just|so|very|kinda|kind of|sort of|actually|totally|literally|basically|definitely|super|quite|a|an|the)\s+`)
	// function is what a note leaves out of a clause: a first-person
	// subject or possessive, "it", "am", "is", "was", "that", "to", "and". A
	// reader (a model) restores them, and the budget holds more facts
	// (LoCoMo at 4k: 1,209 -> 1,273 answers kept).
	function = func() map[string]bool {
		m := map[string]bool{}
		for _, w := range strings.Fields("i i'm i've i'd me my we we're we've our it it's its am is are was were that this some to and") {
			m[w] = true
		}
		return m
	}()
	// reQuote is a quoted span, which stays as written: "Bring it on Home".
	reQuote = regexp.MustCompile(`"[^"]+"|\x{201C}[^\x{201D}]+\x{201D}|(?:^|\s)'[^'\n]+'(?:[\s.,!?;:]|$)`)
)

// tighten writes a conversation's clause as a note: without interjections
// and a vocative at its start ("Wow, Sam, ..."), the other addressed at its
// end (", Sam!"), fillers ("really", "just", "so") and the function words
// a note leaves out. Quoted text stays as written.
func tighten(cl string, vocative *regexp.Regexp) string {
	t := strings.ReplaceAll(cl, "\u2019", "'")
	t = reOpener.ReplaceAllString(t, "")
	t = reVocative.ReplaceAllString(t, "")
	if vocative != nil {
		t = vocative.ReplaceAllString(t, "$1")
	}
	var sb strings.Builder
	prev := 0
	note := func(s string, more bool) string { return noteWords(reFiller.ReplaceAllString(s, ""), more) }
	for _, q := range reQuote.FindAllStringIndex(t, -1) {
		sb.WriteString(note(t[prev:q[0]], true))
		sb.WriteString(t[q[0]:q[1]])
		prev = q[1]
	}
	sb.WriteString(note(t[prev:], false))
	t = strings.TrimSpace(sb.String())
	if len(strings.Fields(t)) < 2 {
		return ""
	}
	r, n := utf8.DecodeRuneInString(t)
	return string(unicode.ToUpper(r)) + t[n:]
}

// noteWords drops the function words of s that a word follows (or, with
// more, more text), keeping "to be" ("can't wait to be a mom").
func noteWords(s string, more bool) string {
	words := strings.Split(s, " ")
	out := words[:0]
	for i, w := range words {
		next := ""
		if i+1 < len(words) {
			next = strings.ToLower(words[i+1])
		} else if more {
			next = "\x00"
		}
		lw := strings.ToLower(w)
		if function[lw] && next != "" && !(lw == "to" && (next == "be" || next == "become")) {
			continue
		}
		out = append(out, w)
	}
	return strings.Join(out, " ")
}

// endsSentence reports whether s ends a sentence.
func endsSentence(s string) bool {
	s = strings.TrimRight(s, `"')]`)
	return strings.HasSuffix(s, ".") || strings.HasSuffix(s, "!") || strings.HasSuffix(s, "?") || strings.HasSuffix(s, "…")
}

// reClause is where a long sentence of a conversation splits into
// clauses that stand alone: a dash, a semicolon, ", but", ", and", ", so".
var reClause = regexp.MustCompile(` (?:-|–|—) |; |, (?:but|and|so|which|because) `)

// clauses splits a sentence into clauses of at least five words each (a
// shorter piece stays with its neighbour), so that selection can keep the
// informative part of a long sentence.
func clauses(sent string) []string {
	locs := reClause.FindAllStringIndex(sent, -1)
	if len(locs) == 0 {
		return []string{sent}
	}
	var out []string
	start := 0
	for _, l := range locs {
		piece := strings.TrimSpace(sent[start:l[0]])
		rest := strings.TrimSpace(sent[l[1]:])
		if len(strings.Fields(piece)) < 5 || len(strings.Fields(rest)) < 5 {
			continue
		}
		out = append(out, piece)
		start = l[1]
		if sep := strings.TrimSpace(sent[l[0]:l[1]]); strings.HasPrefix(sep, ",") {
			start = l[0] + 2 // keep the conjunction: "but ...", "and ..."
		}
	}
	return append(out, strings.TrimSpace(sent[start:]))
}

// isGoal reports whether a user's sentence states a task: a request, an
// instruction, a question or a statement of some substance, not a greeting
// or small talk.
func isGoal(sent string) bool {
	if isSmallTalk(sent) || reGreeting.MatchString(strings.TrimSpace(sent)) {
		return false
	}
	words := len(contentWords(sent))
	return words >= 2 && (isRequest(sent) || strings.HasSuffix(sent, "?")) || words >= 3
}

var (
	reGreeting     = regexp.MustCompile(`(?i)^(hi|hey|hello|good (morning|afternoon|evening)|greetings|howdy)\b[^.!?]{0,30}[.!?]*$`)
	reFirstPerson  = regexp.MustCompile(`(?i)\b(i|i'm|i've|i'd|i'll|my|mine|we|we're|we've|we'll|our|me|us)\b`)
	reSecondPerson = regexp.MustCompile(`(?i)\b(you|your|you're|you've|let's)\b`)
	rePlan         = regexp.MustCompile(`(?i)\b(going to|gonna|plan(ning)? to|will be|hoping to|can't wait to|looking forward to)\b`)
)

// fromSummaries turns summaries (in template form) into candidate bullets,
// keeping their sections.
func fromSummaries(msgs []session.Message) []*unit {
	var units []*unit
	order := 0
	for i := range msgs {
		text := msgs[i].Content.Text
		if msgs[i].Compaction != nil {
			text = msgs[i].Compaction.SummaryText
		}
		s, found := summary.Parse(text)
		if len(found) == 0 { // not a summary: treat as plain text
			for _, sent := range sentences(text) {
				units = append(units, &unit{section: summary.Facts, text: sent, msg: -1, order: order, damp: 1})
				order++
			}
			continue
		}
		for _, h := range summary.Headings {
			var lastDate time.Time
			for _, b := range s.Sections[h] {
				d, rest := dated(b)
				if d.IsZero() && !lastDate.IsZero() && reSpeakerRun.MatchString(b) {
					// A conversation's bullet written without its date (its part
					// began mid-session): it was said on the date before it.
					d, rest = lastDate, b
				}
				if !d.IsZero() {
					lastDate = d
					// A conversation's bullet: one unit per sentence, so that
					// condensing keeps the informative ones.
					for _, run := range speakerRuns(rest) {
						prefix := ""
						if run[0] != "" {
							prefix = run[0] + ": "
						}
						for _, sent := range sentences(run[1]) {
							units = append(units, &unit{section: h, text: prefix + sent, speaker: prefix, msg: -1, order: order, damp: 1, date: d})
							order++
						}
					}
					continue
				}
				u := &unit{section: h, text: b, msg: -1, order: order, damp: 1}
				order++
				switch h {
				case summary.Instructions:
					u.must = true
				case summary.Goal:
					u.must = i == 0 // the session's goal comes from the oldest part
				case summary.OpenTasks:
					u.bonus = 2 * float64(i+1) / float64(len(msgs)) // later parts supersede
				}
				units = append(units, u)
			}
		}
	}
	// Order by position within the session: oldest part first, sections in
	// template order within a part; rendering sorts by order per section.
	return units
}

// compose selects units within maxTokens and renders them.
func (s *Summarizer) compose(units []*unit, maxTokens int, focus string) (string, int) {
	df := score(units, focus)
	n := float64(len(units)) + 1
	p := &picker{s: s, covered: map[string]bool{}, chosen: make([]*unit, 0, 64),
		budget: maxTokens - s.counter.Count(summary.New().Render()) - 2,
		weight: func(w string) float64 { return math.Log(1 + n/float64(df[w])) }}
	// Must-haves first, in order: the goal and the user's instructions.
	var rest []*unit
	for _, u := range units {
		if u.must && p.gain(u) > 0 {
			p.take(u)
		} else {
			rest = append(rest, u)
		}
	}
	h := &unitHeap{}
	for _, u := range rest {
		if g := p.gain(u); g > 0 {
			heap.Push(h, scored{u: u, ratio: g / float64(u.estCost())})
		}
	}
	if len(p.chosen) == 0 && h.Len() == 0 {
		// Nothing scores (only stop words, say): keep the text itself, oldest
		// first, so that a summary never comes back empty.
		for _, u := range units {
			if p.used >= p.budget {
				break
			}
			p.take(u)
		}
	}
	for round := 0; ; round++ {
		p.greedy(h)
		text, n := s.render(p.chosen, maxTokens)
		// Sentences of one message share a bullet, so the rendering is
		// cheaper than the sum of its picks: spend the difference.
		slack := maxTokens - n
		if round >= 3 || h.Len() == 0 || slack < 12 {
			return text, n
		}
		p.budget += slack
	}
}

// score sets each unit's words, bonus and damping from its features, and
// returns how many units hold each word.
func score(units []*unit, focus string) map[string]int {
	df := map[string]int{}
	focusWords := map[string]bool{}
	for _, w := range contentWords(focus) {
		focusWords[w] = true
	}
	// The participants of a conversation are named everywhere: their names
	// are no fact of a sentence.
	var participants []string
	for _, u := range units {
		if name := strings.TrimSuffix(u.speaker, ": "); !u.date.IsZero() && name != "" && !slices.Contains(participants, name) {
			participants = append(participants, name)
		}
	}
	for _, u := range units {
		u.words = contentWords(u.text)
		for _, w := range u.words {
			df[w]++
		}
		said := u.text
		if u.raw != "" {
			said = u.raw // a conversation's clause as said, before tighten
		}
		// A conversation's clause is scored as said: its note leaves out
		// the dates its line carries.
		f := features(withoutNames(strings.TrimPrefix(said, u.speaker), participants))
		if !u.date.IsZero() && reDecide.MatchString(said) {
			f-- // "I'll" in a chat is a promise to talk, seldom a decision
		}
		u.bonus += featureWeight * f
		if isSmallTalk(said) {
			u.damp = 0 // greetings and acknowledgements carry nothing to keep
		}
		if !u.date.IsZero() {
			// A conversation: what people tell of themselves (what they did,
			// have, plan) is what is asked about later; advice to the other
			// and generic remarks much less.
			body := strings.TrimPrefix(said, u.speaker)
			switch {
			case reFirstPerson.MatchString(body):
				u.bonus += 1.5
			case reSecondPerson.MatchString(body):
				u.damp *= 0.25
			}
			if f == 0 && len(u.words) <= 6 {
				u.damp *= 0.3
			}
		}
		for _, w := range u.words {
			if focusWords[w] {
				u.bonus += 2
			}
		}
	}
	return df
}

// picker picks units within a token budget, each by its gain: the weight
// of the words it would cover first, plus its bonus, damped.
type picker struct {
	s            *Summarizer
	weight       func(string) float64
	covered      map[string]bool
	chosen       []*unit
	used, budget int
}

func (p *picker) gain(u *unit) float64 {
	g := u.bonus
	for _, w := range u.words {
		if !p.covered[w] {
			g += p.weight(w)
		} else {
			g += coveredWeight * p.weight(w)
		}
	}
	return g * u.damp
}

// take picks u when it fits the budget.
func (p *picker) take(u *unit) bool {
	if u.cost == 0 {
		u.cost = p.s.bulletCost(u)
	}
	if p.used+u.cost > p.budget {
		return false
	}
	p.used += u.cost
	p.chosen = append(p.chosen, u)
	for _, w := range u.words {
		p.covered[w] = true
	}
	return true
}

// greedy picks from h while there is budget, lazily: gains only shrink as
// coverage grows, so a popped unit whose recomputed ratio still beats the
// next bound is the best pick.
func (p *picker) greedy(h *unitHeap) {
	for h.Len() > 0 && p.used < p.budget {
		top := heap.Pop(h).(scored)
		if top.u.cost == 0 {
			top.u.cost = p.s.bulletCost(top.u)
		}
		g := p.gain(top.u)
		if g <= 0 {
			continue
		}
		r := g / float64(top.u.cost)
		if h.Len() > 0 && r < (*h)[0].ratio {
			heap.Push(h, scored{u: top.u, ratio: r})
			continue
		}
		p.take(top.u)
	}
}

// bulletCost is the exact token cost of a unit's line in the rendering
// ("- " + text + newline), clipping a sentence that is too long. The text is
// tokenised once.
func (s *Summarizer) bulletCost(u *unit) int {
	n := s.counter.Count("- " + u.text + "\n")
	if u.section == summary.Instructions && n <= maxInstructionTokens {
		return n + 1 // an instruction stays whole: it is quoted, never cut
	}
	if n > maxSentenceTokens+3 {
		u.text = s.counter.Truncate(u.text, maxSentenceTokens-1) + "…"
		n = maxSentenceTokens + 3
	}
	if !u.date.IsZero() {
		// A dated unit joins its date's bullet, whose date and speaker
		// labels it mostly shares: it costs about its words.
		return s.counter.Count(" "+strings.TrimPrefix(u.text, u.speaker)) + 1
	}
	return n + 1
}

// render writes the chosen units per section in session order, sentences
// of one message joined in one bullet, and returns the text and its tokens.
// Should the exact count exceed maxTokens, the last-chosen units go.
func (s *Summarizer) render(chosen []*unit, maxTokens int) (string, int) {
	for {
		out := summary.New()
		sorted := append([]*unit(nil), chosen...)
		sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].order < sorted[j].order })
		dayLines := dayLinesOf(sorted)
		var prev *unit
		line := ""
		flush := func() {
			if prev != nil {
				out.Add(prev.section, line)
			}
		}
		for _, u := range sorted {
			if !u.date.IsZero() {
				if sb := dayLines[dayKey{u.section, u.date}]; sb != nil {
					flush()
					prev = nil
					out.Add(u.section, sb.String())
					delete(dayLines, dayKey{u.section, u.date})
				}
				continue
			}
			if prev != nil && u.msg >= 0 && u.msg == prev.msg && u.section == prev.section && u.speaker == prev.speaker {
				line += " " + strings.TrimPrefix(u.text, u.speaker)
				continue
			}
			flush()
			prev, line = u, u.text
		}
		flush()
		text := strings.TrimSpace(out.Render())
		n := s.counter.Count(text)
		if len(chosen) == 0 || n <= maxTokens {
			return text, n
		}
		chosen = chosen[:len(chosen)-1]
	}
}

// dayKey is a bullet of dated units: a section's line for one date.
type dayKey struct {
	section string
	date    time.Time
}

// dayLinesOf writes the bullets of the dated units (a conversation) of
// sorted: one per section and date, "8 May 2023: Caroline: ... ; Melanie:
// ...", each speaker's clauses together, in the order the speakers first
// spoke that day (a label per speaker, not per turn).
func dayLinesOf(sorted []*unit) map[dayKey]*strings.Builder {
	dayLines := map[dayKey]*strings.Builder{}
	lastSpeaker := map[dayKey]string{}
	var dated []*unit
	firstSpoke := map[string]int{}
	spoke := func(u *unit) string { return day(u.date) + "\x00" + u.section + "\x00" + u.speaker }
	for _, u := range sorted {
		if u.date.IsZero() {
			continue
		}
		dated = append(dated, u)
		if _, ok := firstSpoke[spoke(u)]; !ok {
			firstSpoke[spoke(u)] = u.order
		}
	}
	sort.SliceStable(dated, func(i, j int) bool { return firstSpoke[spoke(dated[i])] < firstSpoke[spoke(dated[j])] })
	for _, u := range dated {
		k := dayKey{u.section, u.date}
		sb := dayLines[k]
		if sb == nil {
			sb = &strings.Builder{}
			sb.WriteString(day(u.date) + ": ")
			dayLines[k], lastSpeaker[k] = sb, "\x00"
		}
		body := strings.TrimPrefix(u.text, u.speaker)
		switch {
		case lastSpeaker[k] == u.speaker:
			if !endsSentence(sb.String()) {
				sb.WriteByte('.')
			}
			sb.WriteString(" " + body)
		case lastSpeaker[k] == "\x00":
			sb.WriteString(u.speaker + body)
		case endsSentence(sb.String()):
			sb.WriteString(" " + u.speaker + body)
		default:
			sb.WriteString("; " + u.speaker + body)
		}
		lastSpeaker[k] = u.speaker
	}
	return dayLines
}

type scored struct {
	u     *unit
	ratio float64
}

type unitHeap []scored

func (h unitHeap) Len() int { return len(h) }
func (h unitHeap) Less(i, j int) bool {
	if h[i].ratio != h[j].ratio {
		return h[i].ratio > h[j].ratio
	}
	return h[i].u.order < h[j].u.order // deterministic ties: earlier first
}
func (h unitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *unitHeap) Push(x any)   { *h = append(*h, x.(scored)) }
func (h *unitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

var (
	reNumber  = regexp.MustCompile(`\b\d[\d,.:/-]*\b`)
	reMonth   = regexp.MustCompile(`(?i)\b(jan(uary)?|feb(ruary)?|mar(ch)?|apr(il)?|may|june?|july?|aug(ust)?|sep(tember)?|oct(ober)?|nov(ember)?|dec(ember)?|monday|tuesday|wednesday|thursday|friday|saturday|sunday|yesterday|tomorrow|last (week|month|year)|next (week|month|year))\b`)
	reIdent   = regexp.MustCompile(`\b[A-Za-z]+[_\-]?\d[\w-]*\b|\b\w+_\w+\b|\b[a-z]+[A-Z]\w*\b|\b[0-9a-f]{7,40}\b|\b[A-Z0-9]{5,}\b`)
	rePath    = regexp.MustCompile(`(?:^|[\s(\x60'"])(?:[~.]?/[\w.@-]+(?:/[\w.@-]+)+|[\w-]+(?:/[\w.@-]+)+\.\w+|[\w-]+\.(?:go|py|js|ts|tsx|rs|java|c|h|cc|cpp|rb|json|yaml|yml|toml|md|txt|sh|sql|html|css|pony|lock|cfg|ini|xml))\b`)
	reURL     = regexp.MustCompile(`https?://\S+|\b[\w.+-]+@[\w-]+\.[\w.]+\b`)
	reQuoted  = regexp.MustCompile("`[^`]+`|\"[^\"]{2,60}\"")
	reError   = regexp.MustCompile(`(?i)\b(error|errors|exception|traceback|failed|failure|fails|fail|bug|crash(ed|es)?|segfault|panic|invalid|denied|refused|cannot|can't|unable|not found|timeout|timed out|fix(ed|es)?|resolved|workaround)\b`)
	reDecide  = regexp.MustCompile(`(?i)\b(decided|decide|decision|agreed|agree|chose|choose|chosen|confirm(ed)?|approved|going with|we will|we'll|i will|i'll|plan(ned)? to|settled on|instead of|switch(ed)? to|booked|cancel(l)?ed|selected|opted)\b`)
	reRequest = regexp.MustCompile(`(?i)^(please|can you|could you|would you|let's|now|next|also|then|fix|add|implement|create|update|remove|check|find|book|change|cancel|make|write|run|show|tell|help)\b`)
)

// features scores the information a text carries beyond its words.
func features(t string) float64 {
	f := 0.0
	f += math.Min(3, 1.5*float64(len(reNumber.FindAllStringIndex(t, -1))))
	f += math.Min(2, 1.0*float64(len(reMonth.FindAllStringIndex(t, -1))))
	f += math.Min(3, 1.0*float64(len(reIdent.FindAllStringIndex(t, -1))))
	f += math.Min(3, 1.5*float64(len(rePath.FindAllStringIndex(t, -1))))
	f += math.Min(2, 1.0*float64(len(reURL.FindAllStringIndex(t, -1))))
	f += math.Min(2, 0.5*float64(len(reQuoted.FindAllStringIndex(t, -1))))
	f += math.Min(3, 0.7*float64(properNames(t)))
	if reError.MatchString(t) {
		f += 1.5
	}
	if reDecide.MatchString(t) {
		f += 1
	}
	return f
}

// withoutNames removes the given names from t.
func withoutNames(t string, names []string) string {
	for _, n := range names {
		t = strings.ReplaceAll(t, n, "")
	}
	return t
}

// properNames counts capitalised words that do not start a sentence.
func properNames(t string) int {
	n := 0
	start := true
	for _, w := range strings.Fields(t) {
		r, _ := utf8.DecodeRuneInString(w)
		if !start && unicode.IsUpper(r) && w != "I" && !strings.HasPrefix(w, "I'") {
			n++
		}
		start = strings.HasSuffix(w, ".") || strings.HasSuffix(w, "!") || strings.HasSuffix(w, "?") || strings.HasSuffix(w, ":")
	}
	return n
}

// isInstruction reports whether a user's sentence is a standing
// instruction: an imperative request of four words or more, not
// encouragement or small talk.
func isInstruction(t string) bool {
	t = strings.TrimSpace(t)
	return ledger.IsInstruction(t) && !isSmallTalk(t)
}

func classify(role session.Role, t string) string {
	switch {
	case role == session.RoleUser && isInstruction(t):
		return summary.Instructions
	case reError.MatchString(t):
		return summary.Errors
	case rePath.MatchString(t):
		return summary.Files
	case reDecide.MatchString(t):
		return summary.Decisions
	}
	return summary.Facts
}

func classifyTool(line string) string {
	switch {
	case reError.MatchString(line):
		return summary.Errors
	case rePath.MatchString(line):
		return summary.Files
	}
	return summary.Facts
}

func isRequest(t string) bool { return reRequest.MatchString(strings.TrimSpace(t)) }

var smallTalk = regexp.MustCompile(`(?i)^(hi|hey|hello|thanks|thank you|thx|wow|whoa|haha|lol|oh|ooh|aw+|ok|okay|cool|great|awesome|nice|sure|yes|yeah|yep|yup|no problem|you're welcome|sounds (good|great|fun|amazing|awesome|like)|good (to|morning|night|luck)|take care|bye|see you|talk (to you )?(soon|later)|catch you|congrat|exactly|absolutely|definitely|totally|agreed?|true|right|so true|same|that's (great|awesome|amazing|so cool|wonderful|cool|fantastic|incredible|impressive|so|really|true|right)|that sounds|it sounds|what a|how (cool|fun|nice|great|amazing|awesome|sweet|lovely)|i'm (so )?(glad|happy|proud|sorry) (to hear|for you|of you)|glad to hear|sorry to hear|me too|have (a blast|fun|a great)|go (for it|to bed)|guess what|you (got|can do) this|keep (it )?up|love (it|that)|i love (it|that)|no worries|of course|alright|all right|take it easy|can't wait to (hear|see)|have fun|good luck|i appreciate (it|that)|appreciate (it|that))\b`)

func isSmallTalk(t string) bool {
	if i := strings.Index(t, ": "); i > 0 && i < 40 {
		t = t[i+2:] // drop the speaker
	}
	return smallTalk.MatchString(strings.TrimSpace(t)) && len(contentWords(t)) < 6
}

// toolLines picks the informative lines of a tool output: the first
// non-empty line, and lines with errors, paths, numbers or identifiers, at
// most maxToolLines in all.
func toolLines(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if len(line) < 3 {
			continue
		}
		if len(out) == 0 || reError.MatchString(line) || rePath.MatchString(line) || reIdent.MatchString(line) || reNumber.MatchString(line) {
			if len(line) > 300 {
				line = clipUTF8(line, 300) + "…"
			}
			out = append(out, line)
			if len(out) >= maxToolLines {
				break
			}
		}
	}
	return out
}

var reListNumber = regexp.MustCompile(`^\d{1,2}[.)]\s+`)

var abbreviations = map[string]bool{"e.g.": true, "i.e.": true, "mr.": true, "mrs.": true, "ms.": true, "dr.": true, "vs.": true, "etc.": true, "st.": true, "no.": true}

// sentences splits text into sentences and lines.
func sentences(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "-*•>#"))
		line = reListNumber.ReplaceAllString(line, "") // "2. don't return ..." is the sentence "don't return ..."
		if line == "" {
			continue
		}
		start := 0
		for i := 0; i < len(line); i++ {
			c := line[i]
			if c != '.' && c != '!' && c != '?' {
				continue
			}
			j := i + 1
			for j < len(line) && (line[j] == '.' || line[j] == '!' || line[j] == '?' || line[j] == '"' || line[j] == ')') {
				j++
			}
			if j >= len(line) || line[j] != ' ' {
				continue
			}
			k := j
			for k < len(line) && line[k] == ' ' {
				k++
			}
			if k >= len(line) {
				break
			}
			r, _ := utf8.DecodeRuneInString(line[k:])
			if !unicode.IsUpper(r) && !unicode.IsDigit(r) && r != '"' && r != '(' {
				continue
			}
			word := line[strings.LastIndexByte(line[:j], ' ')+1 : j]
			if abbreviations[strings.ToLower(word)] {
				continue
			}
			if s := strings.TrimSpace(line[start:j]); s != "" {
				out = append(out, s)
			}
			start = k
			i = k - 1
		}
		if s := strings.TrimSpace(line[start:]); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// contentWords returns the distinct lower-cased words of t that are not stop
// words, lightly stemmed.
func contentWords(t string) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range strings.FieldsFunc(t, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '_' && r != '\''
	}) {
		w := strings.ToLower(strings.Trim(f, "'"))
		w = strings.TrimSuffix(w, "'s")
		if len(w) < 3 && !unicode.IsDigit([]rune(w + "x")[0]) || stop[w] {
			continue
		}
		w = stem(w)
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

func stem(w string) string {
	for _, suf := range []string{"ing", "ies", "es", "ed", "s"} {
		if len(w) > len(suf)+3 && strings.HasSuffix(w, suf) {
			if suf == "ies" {
				return w[:len(w)-3] + "y"
			}
			return w[:len(w)-len(suf)]
		}
	}
	return w
}

func clipUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

var stop = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a about above after again against all am an and any are aren't as at be because been before being
below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few for from
further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his how how's i i'd
i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor not of off on once only or other
ought our ours ourselves out over own same shan't she she'd she'll she's should shouldn't so some such than that that's the their
theirs them themselves then there there's these they they'd they'll they're they've this those through to too under until up very
was wasn't we we'd we'll we're we've were weren't what what's when when's where where's which while who who's whom why why's with
won't would wouldn't you you'd you'll you're you've your yours yourself yourselves also just really like get got yeah yes oh wow hey
hi okay ok thanks thank much lot lots things thing something anything everything one ones gonna wanna sure well still even now
know think feel going go make made see way time really pretty kind sort actually definitely totally always never ever great good
awesome amazing nice cool glad happy love`) {
		m[w] = true
	}
	return m
}()
