// Package eval measures what a compaction keeps: LoCoMo fact retention (the
// share of question answers whose evidence was summarised and that the
// compacted context still states) and the baselines it is compared with.
package eval

import (
	"strings"
	"unicode"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// Categories are the LoCoMo QA categories the retention measure uses:
// multi-hop (1), temporal (2) and single-hop (4). Open-domain (3) and
// adversarial (5) questions have no answer in the text to retain.
var Categories = map[int]bool{1: true, 2: true, 4: true}

// Retention is the retention measure's counts.
type Retention struct {
	Eligible int `json:"eligible"` // questions whose evidence lies wholly in the summarised range
	Kept     int `json:"kept"`     // of those, answers present in the compacted context
}

// Share returns Kept/Eligible (0 when nothing is eligible).
func (r Retention) Share() float64 {
	if r.Eligible == 0 {
		return 0
	}
	return float64(r.Kept) / float64(r.Eligible)
}

// Add sums two measures.
func (r Retention) Add(o Retention) Retention {
	return Retention{Eligible: r.Eligible + o.Eligible, Kept: r.Kept + o.Kept}
}

// Measure scores one compacted conversation. summarised reports whether the
// message at an index of c.Messages was summarised; units are the pieces of
// the compacted context (summary lines and raw tail messages): an answer
// counts as kept when every content word of it appears in one unit.
func Measure(c transcript.Conversation, summarised func(i int) bool, units []string) Retention {
	sets := make([]map[string]bool, len(units))
	for i, u := range units {
		sets[i] = wordSet(u)
	}
	var r Retention
	for _, q := range c.QA {
		if !Categories[q.Category] || strings.TrimSpace(q.Answer) == "" {
			continue
		}
		idx := evidenceIndices(c, q.Evidence)
		if len(idx) == 0 {
			continue
		}
		all := true
		for _, i := range idx {
			if !summarised(i) {
				all = false
				break
			}
		}
		if !all {
			continue
		}
		r.Eligible++
		if present(q.Answer, units, sets) {
			r.Kept++
		}
	}
	return r
}

func evidenceIndices(c transcript.Conversation, evidence []string) []int {
	var out []int
	for _, e := range evidence {
		for _, id := range strings.Split(e, ";") {
			if i, ok := c.DiaIndex[strings.TrimSpace(id)]; ok {
				out = append(out, i)
			}
		}
	}
	return out
}

func present(answer string, units []string, sets []map[string]bool) bool {
	words := Words(answer)
	if len(words) == 0 {
		a := strings.ToLower(strings.TrimSpace(answer))
		for _, u := range units {
			if strings.Contains(strings.ToLower(u), a) {
				return true
			}
		}
		return false
	}
	for _, set := range sets {
		all := true
		for _, w := range words {
			if !set[w] {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func wordSet(s string) map[string]bool {
	set := map[string]bool{}
	for _, w := range Words(s) {
		set[w] = true
	}
	return set
}

// Words returns the normalised content words of s: lower-cased, without
// punctuation, stop words and plural or verb endings.
func Words(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		if stop[f] {
			continue
		}
		for _, suf := range []string{"ing", "es", "ed", "s"} {
			if len(f) > len(suf)+2 && strings.HasSuffix(f, suf) {
				f = f[:len(f)-len(suf)]
				break
			}
		}
		out = append(out, f)
	}
	return out
}

var stop = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields("a an the and or of to in on at for with by from is are was were be been it its this that as s t") {
		m[w] = true
	}
	return m
}()

// ContextUnits splits a compacted context into units: each line of a
// compaction message, each raw message whole.
func ContextUnits(ctx []session.Message) []string {
	var units []string
	for i := range ctx {
		m := &ctx[i]
		if m.IsCompaction {
			units = append(units, strings.Split(m.Content.Text, "\n")...)
			continue
		}
		units = append(units, speaker(m)+": "+m.Content.Text)
	}
	return units
}

func speaker(m *session.Message) string {
	if m.Name != "" {
		return m.Name
	}
	return string(m.Role)
}

// Baselines returns the context units of the two naive summaries of the
// summarised range, each max tokens long: its first tokens and its last.
func Baselines(counter *tokens.Counter, summarisedMsgs []session.Message, max int) (first, last []string) {
	var sb strings.Builder
	for i := range summarisedMsgs {
		sb.WriteString(speaker(&summarisedMsgs[i]) + ": " + summarisedMsgs[i].Content.Text + "\n")
	}
	text := sb.String()
	head := counter.Truncate(text, max)
	tail := text
	if total := counter.Count(text); total > max {
		parts := counter.Split(text, total-max)
		tail = strings.Join(parts[1:], "")
	}
	return strings.Split(head, "\n"), strings.Split(tail, "\n")
}
