package recall

import (
	"strings"
	"unicode/utf8"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
)

// neighbourTokens is the most a neighbour shows when the snippet must be
// cut: the matching message gets the rest.
const neighbourTokens = 60

// Text is m's searchable text as a snippet shows it.
func Text(m *session.Message) string {
	if len(m.ToolCalls) == 0 {
		return m.Content.Text
	}
	var sb strings.Builder
	sb.WriteString(m.Content.Text)
	for _, tc := range m.ToolCalls {
		if sb.Len() > 0 {
			sb.WriteString("\n")
		}
		sb.WriteString(tc.Function.Name + "(" + tc.Function.Arguments + ")")
	}
	return sb.String()
}

// Snippet is the parts a hit shows: before (may be nil), hit, after (may
// be nil), within contract.SnippetTokens as count counts them; the hit's
// text cut around the first place query matches. The parts' states are
// the caller's to set.
func Snippet(before, hit, after *session.Message, query string, count func(string) int) []contract.SnippetPart {
	msgs := []*session.Message{before, hit, after}
	parts := make([]contract.SnippetPart, 0, 3)
	texts := make([]string, 0, 3)
	total := 0
	for _, m := range msgs {
		if m == nil {
			continue
		}
		t := Text(m)
		texts = append(texts, t)
		total += count(t)
		parts = append(parts, contract.SnippetPart{Seq: m.Seq, ID: m.ID, Role: string(m.Role), Name: m.Name, Text: t})
	}
	if total <= contract.SnippetTokens {
		return parts
	}
	// The neighbours first, each within its share (the one before by its
	// end, the one after by its start: what touches the hit); the hit gets
	// what they leave.
	left := contract.SnippetTokens
	for i, p := range parts {
		if p.Seq == hit.Seq {
			continue
		}
		if n := count(texts[i]); n > neighbourTokens {
			at := 0
			if p.Seq < hit.Seq {
				at = len(texts[i])
			}
			parts[i].Text, parts[i].Cut = window(texts[i], at, neighbourTokens, count), true
		}
		left -= count(parts[i].Text)
	}
	for i, p := range parts {
		if p.Seq == hit.Seq && count(texts[i]) > left {
			parts[i].Text, parts[i].Cut = window(texts[i], matchAt(texts[i], query), left, count), true
		}
	}
	return parts
}

// matchAt is where in text the first of query's terms or words is found
// (any case), or 0.
func matchAt(text, query string) int {
	lower := strings.ToLower(text)
	best := -1
	words := strings.FieldsFunc(strings.ToLower(query), func(r rune) bool { return !isWordRune(r) && !isJoiner(r) })
	for _, t := range append(Terms(query), words...) {
		if len(t) < 3 || stopWords[t] {
			continue
		}
		if i := strings.Index(lower, t); i >= 0 && (best < 0 || i < best) {
			best = i
		}
	}
	return max(best, 0)
}

// window is the part of text around byte at within budget tokens, with
// "…" where it was cut: text's start when at is 0, its end when at is
// len(text), else a quarter before at and the rest after.
func window(text string, at, budget int, count func(string) int) string {
	if budget <= 0 {
		return "…"
	}
	size := min(len(text), budget*4)
	for size > 0 {
		start := max(0, min(at-size/4, len(text)-size))
		if at >= len(text) {
			start = len(text) - size
		}
		start, end := runeStart(text, start), runeStart(text, min(len(text), start+size))
		out := text[start:end]
		if start > 0 {
			out = "…" + out
		}
		if end < len(text) {
			out += "…"
		}
		if count(out) <= budget {
			return out
		}
		size = size * 3 / 4
	}
	return "…"
}

// runeStart moves i back to the start of the rune it is in.
func runeStart(s string, i int) int {
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}
