package ledger

import (
	"bytes"
	"regexp"
	"strings"
	"unicode"
)

var (
	// reInstr matches a standing instruction to the assistant: an imperative
	// opening, a rule for "you" (must always, should never), or a request
	// aimed at "you". reNotInstr takes back encouragement and advice that
	// open the same way ("Don't worry", "You should check it out").
	reInstr    = regexp.MustCompile(`(?i)^(please\b|always\b|never\b|don't\b|do not\b|make sure\b|ensure\b|avoid\b|remember to\b|keep in mind\b|only\b|use\b|stop\b|from now on\b)|\byou (must|should|need to|have to) (always|never|not|only)\b|\byou (must not|mustn't|should not|shouldn't)\b|\bi (want|need|would like|'d like) you to\b`)
	reNotInstr = regexp.MustCompile(`(?i)^(please\s+)?(don't|do not|never) (worry|be (sorry|afraid|shy|too)|feel|stress|give up|hesitate|mind|stop (believing|dreaming|trying))\b|^(don't|do not) forget\b[^a-z]*$|^(don't|do not) forget( that|,| -|!)|^never (mind|give up)\b|^only (if|when|just|time)\b|^(please )?(take care|enjoy|have fun|keep (it )?up|keep going|keep (on )?(pushing|rocking|smiling))\b|^use it\b`)
)

// IsInstruction reports whether a user's sentence is a standing
// instruction to the assistant: an imperative request of four words or
// more ("Please always run the linter", "Never change the public API"),
// not encouragement that opens the same way ("Don't worry").
func IsInstruction(sentence string) bool {
	t := strings.TrimSpace(sentence)
	return isInstruction(t, lowerLine(t, nil))
}

// isInstruction is IsInstruction of a trimmed sentence t, l its
// lowerLine: the expressions run only where their fixed words are.
func isInstruction(t string, l []byte) bool {
	exact := foldsOutsideASCII(l)
	if exact || hasPrefixAny(l, openerWords) {
		t = reOpener.ReplaceAllString(t, "")
		l = l[len(l)-len(t):] // (the opener is cut from the start)
	}
	if !exact && !hasPrefixAny(l, instrStarts) && !bytes.Contains(l, []byte("you")) {
		return false
	}
	return reInstr.MatchString(t) && !reNotInstr.MatchString(t) && words(t) >= 4
}

// openerWords begin every match of reOpener; instrStarts every match of
// reInstr's first alternative (the others hold "you").
var (
	openerWords = []string{"actually", "ok", "also", "and", "so", "oh", "wait", "instead", "one more thing", "correction", "update", "change of plan", "scratch that"}
	instrStarts = []string{"please", "always", "never", "don't", "do not", "make sure", "ensure", "avoid", "remember to", "keep in mind", "only", "use", "stop", "from now on"}
	// decisionWords: every match of reDecision's first three
	// alternatives holds one; the last two ("let's go with", "we'll
	// stick with") hold "with" after a sentence that opens with "let"
	// or "ok", or after "we'll" or "we will" (mayDecide).
	decisionWords = []string{"decision", "decided", "agreed", "final", "locked", "settled", "non-negotiable"}
)

// mayDecide reports whether reDecision can match a sentence whose
// lowerLine is l.
func mayDecide(l []byte) bool {
	if foldsOutsideASCII(l) || containsAny(l, decisionWords) {
		return true
	}
	return bytes.Contains(l, []byte("with")) &&
		(hasPrefixAny(l, []string{"let", "ok"}) || bytes.Contains(l, []byte("we'll")) || bytes.Contains(l, []byte("we will")))
}

func hasPrefixAny(l []byte, ps []string) bool {
	for _, p := range ps {
		if bytes.HasPrefix(l, []byte(p)) {
			return true
		}
	}
	return false
}

func containsAny(l []byte, ws []string) bool {
	for _, w := range ws {
		if bytes.Contains(l, []byte(w)) {
			return true
		}
	}
	return false
}

// words is len(strings.Fields(s)), without making the fields.
func words(s string) int {
	n, in := 0, false
	for _, r := range s {
		space := unicode.IsSpace(r)
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

// reOpener is a discourse marker an instruction may open with ("Actually,
// use spaces ..."), not part of its imperative.
var reOpener = regexp.MustCompile(`(?i)^(actually|ok(ay)?|also|and|so|oh|wait|instead|one more thing|correction|update|change of plan|scratch that)\s*[,:;.!-]*\s+`)

var (
	reSentenceEnd = regexp.MustCompile(`[.!?]+["')]*(\s+|$)`)
	reListItem    = regexp.MustCompile(`^\s*(?:[-*•>]+|\d{1,2}[.)])\s+`)
)

// reRule is a rule an agent's user (or its harness) sets anywhere in a
// sentence: "When you're done, you must submit ...", "... you should
// verify again". Between people it is advice; the ledger reads no
// instructions in a conversation between people.
var reRule = regexp.MustCompile(`(?i)\byou (must|should|need to|have to|are required to|may not|cannot|can't)\b`)

// reDecision is a decision the user settles: "we decided to keep X", "the
// datastore stays X; that is final", "Locked decision: ...", "let's go
// with X". Like an instruction it stands until a later one replaces it.
var reDecision = regexp.MustCompile(`(?i)\b(decision|decided|agreed)\b|\b(is|are|stays?|remains?|that's|it's)\s+(final|locked|settled|non-negotiable)\b|\blocked\s+(in|decision)\b|^(ok(ay)?,?\s+)?let'?s\s+(go|stick)\s+with\b|\bwe('ll| will)\s+(go|stick)\s+with\b`)

// IsDecision reports whether a user's sentence settles a decision (four
// words or more): the ledger keeps it verbatim with the instructions.
func IsDecision(sentence string) bool {
	return isDecision(sentence, lowerLine(sentence, nil))
}

// isDecision is IsDecision with l sentence's lowerLine.
func isDecision(sentence string, l []byte) bool {
	if !mayDecide(l) {
		return false
	}
	return reDecision.MatchString(sentence) && words(sentence) >= 4
}

// Prose is text without its fenced blocks (``` or ~~~, from the opening
// line to the closing one): what a user quotes there (a crash log, a
// program's output, an example) is not what the user asks. A fence never
// closed is not a block; its lines stay.
func Prose(text string) string {
	if !strings.Contains(text, "```") && !strings.Contains(text, "~~~") {
		return text
	}
	lines := strings.Split(text, "\n")
	out := lines[:0:0]
	open, fence := -1, ""
	for i, line := range lines {
		t := strings.TrimSpace(line)
		switch {
		case open < 0 && (strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~")):
			open, fence = i, t[:3]
		case open < 0:
			out = append(out, line)
		case strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "":
			open = -1
		}
	}
	if open >= 0 {
		out = append(out, lines[open:]...)
	}
	return strings.Join(out, "\n")
}

// instructions returns the instructions among text's sentences, verbatim:
// each line outside fenced blocks (list markers dropped) split at
// sentence ends; sentences that set a rule for "you" (reRule) or settle a
// decision (IsDecision) too.
func instructions(text string) []string {
	var out []string
	var l []byte
	for line := range strings.SplitSeq(Prose(text), "\n") {
		if mayBeListItem(line) {
			line = reListItem.ReplaceAllString(line, "")
		}
		rest := line
		for rest != "" {
			end := sentenceEnd(rest)
			s := strings.TrimSpace(rest[:end])
			rest = rest[end:]
			if len(s) > 400 || words(s) < 4 {
				continue // (each kind needs four words)
			}
			l = lowerLine(s, l)
			rule := foldsOutsideASCII(l) || bytes.Contains(l, []byte("you"))
			if isInstruction(s, l) || isDecision(s, l) || rule && reRule.MatchString(s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// sentenceEnd is where the first sentence of s ends: past the end of
// reSentenceEnd's leftmost match ([.!?]+["')]*(\s+|$)), or len(s).
func sentenceEnd(s string) int {
	for i := 0; i < len(s); {
		if !isStop(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && isStop(s[j]) {
			j++
		}
		for j < len(s) && (s[j] == '"' || s[j] == '\'' || s[j] == ')') {
			j++
		}
		if j == len(s) {
			return j
		}
		if isSpace(s[j]) {
			for j < len(s) && isSpace(s[j]) {
				j++
			}
			return j
		}
		// No match begins within this run of stops: each would reach the
		// same byte after it.
		i = j
	}
	return len(s)
}

func isStop(c byte) bool { return c == '.' || c == '!' || c == '?' }

// isSpace is \s in the expressions (RE2's: ASCII only).
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// mayBeListItem reports whether reListItem can match line: after its
// leading \s, a list marker ([-*•>] or a digit).
func mayBeListItem(line string) bool {
	i := 0
	for i < len(line) && isSpace(line[i]) {
		i++
	}
	if i == len(line) {
		return false
	}
	c := line[i]
	return c == '-' || c == '*' || c == '>' || '0' <= c && c <= '9' || strings.HasPrefix(line[i:], "•")
}
