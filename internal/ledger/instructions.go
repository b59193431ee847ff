package ledger

import (
	"regexp"
	"strings"
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
	t := reOpener.ReplaceAllString(strings.TrimSpace(sentence), "")
	return reInstr.MatchString(t) && !reNotInstr.MatchString(t) && len(strings.Fields(t)) >= 4
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
	return reDecision.MatchString(sentence) && len(strings.Fields(sentence)) >= 4
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
	for _, line := range strings.Split(Prose(text), "\n") {
		line = reListItem.ReplaceAllString(line, "")
		rest := line
		for rest != "" {
			end := len(rest)
			if loc := reSentenceEnd.FindStringIndex(rest); loc != nil {
				end = loc[1]
			}
			s := strings.TrimSpace(rest[:end])
			rest = rest[end:]
			if (IsInstruction(s) || IsDecision(s) || reRule.MatchString(s) && len(strings.Fields(s)) >= 4) && len(s) <= 400 {
				out = append(out, s)
			}
		}
	}
	return out
}
