package pipeline

import (
	"errors"
	"regexp"
	"strings"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
)

// errInventedInstructions is why a summary whose every "User instructions"
// bullet was invented is asked for again.
var errInventedInstructions = errors.New(`every bullet under "User instructions" was text the user never wrote`)

// instructionReminder is added to a prompt asked again for that reason.
const instructionReminder = "\n\nYour previous answer listed user instructions the user never gave. Under \"User instructions\", " +
	"quote only the user's own words, verbatim (each bullet a quotation of what the user wrote), or write \"- (none)\". " +
	"Answer again with exactly the headings " // + the headings

// sources is the text a summary's "User instructions" may quote, normalised:
// what the user and the pinned messages wrote, and the instructions of the
// summary in force (verified when it was written).
type sources struct {
	blob string
}

// instructionSources collects the sources of a compaction: the pinned
// messages, every user and system message of input, and the instruction
// bullets of the summaries in force or inside input.
func instructionSources(pinned, input []session.Message, prev *session.Message) sources {
	var sb strings.Builder
	add := func(s string) {
		sb.WriteString(normalise(s))
		sb.WriteString("\n\x00\n")
	}
	addSummary := func(m *session.Message) {
		if m == nil || !hasSummary(m) {
			return
		}
		s, _ := summary.Parse(SummaryText(m))
		for _, b := range s.Sections[summary.Instructions] {
			add(b)
		}
	}
	for _, group := range [][]session.Message{pinned, input} {
		for i := range group {
			m := &group[i]
			switch {
			case m.IsCompaction:
				addSummary(m)
			case m.Role == session.RoleUser || m.Role == session.RoleSystem:
				add(m.Content.Text)
			}
		}
	}
	addSummary(prev)
	return sources{blob: sb.String()}
}

// wrote reports whether the sources contain s, normalised: as whole
// words, and not right after a negation the bullet leaves out ("push to
// main" is not what "never push to main" says).
func (src sources) wrote(s string) bool {
	n := normalise(s)
	if n == "" {
		return false
	}
	negated := reNegation.MatchString(n)
	for from := 0; ; {
		i := strings.Index(src.blob[from:], n)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(n)
		from = i + 1
		if (i > 0 && isWordByte(src.blob[i-1]) && isWordByte(n[0])) || (end < len(src.blob) && isWordByte(src.blob[end]) && isWordByte(n[len(n)-1])) {
			continue // inside a word
		}
		if !negated && reNegatedBefore.MatchString(src.blob[max(0, i-24):i]) {
			continue
		}
		return true
	}
}

func isWordByte(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '_' || b >= 0x80
}

var (
	// reNegation opens a bullet that carries its own negation.
	reNegation = regexp.MustCompile(`^(please )?(don't|do not|never|not|no|avoid|stop)\b`)
	// reNegatedBefore ends the text before a match that a negation governs.
	reNegatedBefore = regexp.MustCompile(`\b(don't|do not|never|not|no|avoid|stop|without|n't)\s*$`)
)

var (
	quotes = strings.NewReplacer("\u201c", `"`, "\u201d", `"`, "\u201e", `"`, "\u2018", "'", "\u2019", "'", "\u00ab", `"`, "\u00bb", `"`, "`", "'")
	// reSpeaker is a bullet's attribution: "user: ", "Caroline: ", "The user said: ".
	reSpeaker = regexp.MustCompile(`^(?i)(the\s+)?[\w .'-]{1,40}?(\s+(said|says|asked|wrote|requested|instructed))?\s*:\s+`)
	reQuoted  = regexp.MustCompile(`"([^"]{3,})"`)
	reSplit   = regexp.MustCompile(`(?:[.!?;]+["')]*\s+|\s*…\s*)`)
)

// normalise folds case, whitespace and quotes (every kind to ').
func normalise(s string) string {
	return strings.ToLower(strings.ReplaceAll(strings.Join(strings.Fields(quotes.Replace(s)), " "), `"`, "'"))
}

// verbatim reports whether bullet is text the sources wrote: its quoted
// parts when it has any, else the bullet (without an attribution), each
// sentence of it found as written, after normalising whitespace, quotes
// and case.
func (src sources) verbatim(bullet string) bool {
	b := quotes.Replace(bullet)
	var parts []string
	if qs := reQuoted.FindAllStringSubmatch(b, -1); len(qs) > 0 {
		for _, q := range qs {
			parts = append(parts, q[1])
		}
	} else {
		if src.sentences(b) {
			return true
		}
		parts = []string{reSpeaker.ReplaceAllString(b, "")}
	}
	for _, p := range parts {
		if !src.sentences(p) {
			return false
		}
	}
	return true
}

// sentences reports whether every sentence of p is in the sources.
func (src sources) sentences(p string) bool {
	any := false
	for _, s := range reSplit.Split(p, -1) {
		s = strings.Trim(strings.TrimSpace(s), `"'.!?;:,()[]`)
		if s == "" {
			continue
		}
		if !src.wrote(s) {
			return false
		}
		any = true
	}
	return any
}

// verifyInstructions removes from text the "User instructions" bullets the
// sources do not contain. It returns the text (unchanged when nothing was
// removed), how many it removed, and whether the section is empty now.
func verifyInstructions(text string, src sources) (string, int, bool) {
	s, _ := summary.Parse(text)
	var kept []string
	dropped := 0
	for _, b := range s.Sections[summary.Instructions] {
		if src.verbatim(b) {
			kept = append(kept, b)
		} else {
			dropped++
		}
	}
	if dropped == 0 {
		return text, 0, len(kept) == 0
	}
	s.Sections[summary.Instructions] = kept
	return s.Render(), dropped, len(kept) == 0
}
