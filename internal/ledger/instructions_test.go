package ledger

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/demo"
)

// byExpressions is what instructions, IsInstruction and IsDecision
// answered before their gates: every expression run on every sentence.
func byExpressions(text string) (found, instr, decision []string) {
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
			t := reOpener.ReplaceAllString(s, "")
			isInstr := reInstr.MatchString(t) && !reNotInstr.MatchString(t) && len(strings.Fields(t)) >= 4
			isDecision := reDecision.MatchString(s) && len(strings.Fields(s)) >= 4
			if isInstr {
				instr = append(instr, s)
			}
			if isDecision {
				decision = append(decision, s)
			}
			if (isInstr || isDecision || reRule.MatchString(s) && len(strings.Fields(s)) >= 4) && len(s) <= 400 {
				found = append(found, s)
			}
		}
	}
	return found, instr, decision
}

// The gates (fixed words before an expression runs, the sentence's end
// and a list marker found by hand) answer what the expressions alone
// answer: on users' words from the bundled run and ../shared/data when
// there, on a sentence for each alternative, and on texts made of the
// expressions' pieces.
func TestInstructionGatesAnswerAsTheExpressions(t *testing.T) {
	texts := instructionCorpus(t)
	found := 0
	for _, text := range texts {
		want, wantInstr, wantDecision := byExpressions(text)
		if got := instructions(text); !slices.Equal(got, want) {
			t.Fatalf("instructions(%q) = %q, the expressions say %q", text, got, want)
		}
		found += len(want)
		var gotInstr, gotDecision []string
		for _, line := range strings.Split(Prose(text), "\n") {
			if reListItem.MatchString(line) && !mayBeListItem(line) {
				t.Fatalf("mayBeListItem(%q) is false, but the expression matches", line)
			}
			line = reListItem.ReplaceAllString(line, "")
			for rest := line; rest != ""; {
				end := len(rest)
				if loc := reSentenceEnd.FindStringIndex(rest); loc != nil {
					end = loc[1]
				}
				if got := sentenceEnd(rest); got != end {
					t.Fatalf("sentenceEnd(%q) = %d, the expression says %d", rest, got, end)
				}
				s := strings.TrimSpace(rest[:end])
				rest = rest[end:]
				if IsInstruction(s) {
					gotInstr = append(gotInstr, s)
				}
				if IsDecision(s) {
					gotDecision = append(gotDecision, s)
				}
			}
		}
		if !slices.Equal(gotInstr, wantInstr) || !slices.Equal(gotDecision, wantDecision) {
			t.Fatalf("in %q: IsInstruction %q and IsDecision %q, the expressions say %q and %q", text, gotInstr, gotDecision, wantInstr, wantDecision)
		}
	}
	// Gates that answered nothing would pass the checks above only if
	// the corpus held no instruction.
	if found < 500 {
		t.Fatalf("only %d instructions in %d texts", found, len(texts))
	}
}

func instructionCorpus(t *testing.T) []string {
	t.Helper()
	texts := []string{
		"Please always run the linter before you commit.", "Never change the public API of the client.",
		"Don't worry about the tests, they are flaky.", "Actually, use spaces instead of tabs from now on.",
		"OK, let's go with Postgres for the datastore.", "We decided to keep the old schema for now.",
		"The datastore stays SQLite; that is final.", "When you're done, you must submit the patch.",
		"I want you to check every file twice.", "You should never push to main directly.",
		"- please keep the answers short and polite", "1. Always answer in French, whatever they ask.",
		"•  use the staging bucket for every upload", "> Never delete a user's data without asking.",
		"Scratch that: only use the v2 endpoint from now on.", "Locked decision: the cache stays in memory.",
		"Do not forget that the deploy is on Friday.", "Only if you have time, look at the logs.",
		"Stop using the old client. Use the new one!!! Thanks.", "Wait... make sure the backups run?\" Yes.",
		"\u017fTOP using the old one, you mu\u017ft not.", "o\u212a, use the other one from now on please.",
		"Make sure.\") You must always log in.", "Ensure the run passes...x then you should stop.",
		"ok,\tlet's stick with the plan we agreed on.", "It's non-negotiable that we will go with Go.",
	}
	users := trajectoryTexts(string(demo.Trajectory))
	files, _ := filepath.Glob("../../../shared/data/agent_trajectories/*/*")
	files = append(files, "../../../shared/data/locomo/locomo8.json")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) < 8<<20 {
			users = append(users, trajectoryTexts(string(b))...)
		}
	}
	texts = append(texts, users...)
	pieces := []string{"please ", "always ", "never ", "don't ", "do not ", "make sure ", "ensure ", "avoid ", "remember to ", "keep in mind ",
		"only ", "use ", "stop ", "from now on ", "you ", "you must ", "you should ", "need to ", "have to ", "not ", "i want you to ",
		"I'd like you to ", "actually, ", "OK ", "okay: ", "also ", "and ", "so ", "wait - ", "instead ", "correction ", "scratch that ",
		"decided ", "decision ", "agreed ", "is ", "final", "locked in ", "settled ", "non-negotiable", "let's go with ", "we'll stick with ",
		"worry ", "forget ", "the tests ", "the file ", "run it ", ".", "!", "?", "...", "\"", "'", ")", " ", "  ", "\t", "\n", "- ", "* ",
		"• ", "> ", "1. ", "12) ", "```\n", "\u017f", "\u212a", "YOU ", "Please ", "NEVER "}
	return append(texts, madeOf(pieces, 14, 3, 4)...)
}

// trajectoryTexts are the JSON strings of a data file, unescaped enough
// to read as messages: the users' words, the assistants' and tool outputs
// alike (what a sentence looks like).
func trajectoryTexts(s string) []string {
	var out []string
	for _, part := range strings.Split(s, `"`) {
		if len(part) > 20 && strings.Contains(part, " ") {
			out = append(out, strings.ReplaceAll(part, `\n`, "\n"))
		}
	}
	return out
}

// textPlan's gates: a line without them matches neither expression.
func TestPlanGatesAnswerAsTheExpressions(t *testing.T) {
	heads := 0
	for _, text := range append(instructionCorpus(t), "Plan:", "My PLAN for today:  ", "the plan - step by step :", "- [x] done", "1) [ ] todo") {
		for _, l := range strings.Split(text, "\n") {
			if reChecklist.MatchString(l) && !strings.Contains(l, "[") {
				t.Fatalf("%q is a checklist item without a box", l)
			}
			if rePlanHead.MatchString(l) {
				heads++
				if !strings.Contains(l, ":") || !bytes.Contains(lowerLine(l, nil), []byte("plan")) {
					t.Fatalf("%q is a plan's head the gate passes over", l)
				}
			}
		}
	}
	if heads < 3 {
		t.Fatalf("%d plan heads in the corpus", heads)
	}
}
