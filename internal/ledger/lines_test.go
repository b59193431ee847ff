package ledger

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/demo"
)

// The gates answer what the expressions alone answer, on real tool output
// (the bundled run, and the trajectories of ../shared/data when there),
// on a line for each alternative, and on lines made of their pieces.
func TestLineGatesAnswerAsTheExpressions(t *testing.T) {
	lines := corpusLines(t)
	if len(lines) < 1000 {
		t.Fatalf("corpus of %d lines", len(lines))
	}
	var buf []byte
	matched := [2]int{}
	for _, line := range lines {
		l := strings.TrimSpace(line)
		buf = lowerLine(l, buf)
		if got, want := errorLine(l, buf), reErrorLine.MatchString(l); got != want {
			t.Errorf("errorLine(%q) = %v, the expression says %v", l, got, want)
		} else if want {
			matched[0]++
		}
		if got, want := testLine(l, buf), reTestLine.MatchString(l); got != want {
			t.Errorf("testLine(%q) = %v, the expression says %v", l, got, want)
		} else if want {
			matched[1]++
		}
	}
	// A gate that answered false everywhere would pass the checks above
	// only if the corpus held no reporting line.
	if matched[0] < 20 || matched[1] < 10 {
		t.Fatalf("only %d error and %d test lines in the corpus", matched[0], matched[1])
	}
}

func corpusLines(t *testing.T) []string {
	t.Helper()
	lines := []string{
		"ValueError: bad", "foo.bar.KeyError", "a.Error", "xError", "Error", "Error: no", "ERROR[E0308]: mismatched",
		"error:", "error[x]:", "fatal: not a git repository", "panic: runtime error", "E   assert 1 == 2", "E  x",
		"FAILED tests/test_a.py::test_b", "FAILEDx", "bash: foo: command not found", "cat: x: No such file or directory",
		"main.go:12:3: error: undefined", "a.c:1: fatal error: x.h", "Segmentation fault (core dumped)", "zsh: segmentation fault  ./a",
		"==== 3 passed in 0.1s ====", "===== 1 failed, 2 passed in 1.2s =====", "ok  	pkg/x	0.12s", "FAIL	pkg/y	1.0s",
		"--- FAIL: TestX (0.00s)", "Ran 12 tests in 0.003s", "OK", "FAILED (failures=1)", "Tests: 3 passed, 1 failed",
		"test result: ok. 3 passed", "12 passing (30ms)", "2 failing", "Test: passed", "okay", "failing", "ran", "testing",
		"\u017fegmentation fault", "\u212aeyError", "o\u212a", "Te\u017ft: passed", "tests: 1 pa\u017f\u017fed",
		"The error: was here", "x = ValueError", "Traceback (most recent call last):", "no errors", "e  ", "E  ",
	}
	trajectory := string(demo.Trajectory)
	sources := []string{trajectory}
	files, _ := filepath.Glob("../../../shared/data/agent_trajectories/*/*")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) < 8<<20 {
			sources = append(sources, string(b))
		}
	}
	for _, s := range sources {
		// JSON-encoded outputs hold their newlines escaped.
		for _, l := range strings.Split(strings.ReplaceAll(s, `\n`, "\n"), "\n") {
			lines = append(lines, l)
		}
	}
	// Lines made of the expressions' pieces, at random.
	pieces := []string{"Error", "error", "Exception", "[E1]", ":", ": ", " ", "  ", "fatal", "panic", "E", "FAILED", "FAIL", "ok", "OK",
		"passed", "failed", "errors", "passing", "failing", "=", "==", " in ", "Ran ", "3", "0.5s", "tests", "Test", "test result",
		"command not found", "No such file or directory", "a.go", ":12", "Segmentation fault", "x", ".", "(", ")", "\t", "fatal error", "\u017f", "\u212a"}
	return append(lines, madeOf(pieces, 8, 1, 2)...)
}

// madeOf is 20,000 texts of 1 to most of pieces each, at random (seeded).
func madeOf(pieces []string, most int, seed1, seed2 uint64) []string {
	r := rand.New(rand.NewPCG(seed1, seed2))
	out := make([]string, 0, 20000)
	for range 20000 {
		var b strings.Builder
		for range 1 + r.IntN(most) {
			b.WriteString(pieces[r.IntN(len(pieces))])
		}
		out = append(out, b.String())
	}
	return out
}

// BenchmarkScan reads the bundled run's tool outputs as a compaction's
// ledger does.
func BenchmarkScan(b *testing.B) {
	texts := strings.Split(strings.ReplaceAll(string(demo.Trajectory), `\n`, "\n"), `"content"`)
	b.ResetTimer()
	for b.Loop() {
		for _, s := range texts {
			scan(s)
		}
	}
}

// A question is found from askFrom where reAsk finds it in the whole text: on real messages, on a
// question for each alternative, and on texts made of their pieces.
func TestAskGateAnswersAsTheExpression(t *testing.T) {
	var texts []string
	for i, l := range corpusLines(t) {
		if i%3 == 0 { // a third of the real lines: the expression is slow under the race detector
			texts = append(texts, l)
		}
	}
	texts = append(texts, "Would you like me to proceed?", "Shall I?", "should i go ahead", "Do you want us to continue?",
		"Please confirm.", "Can you CONFIRM the order", "confirm whether it works", "Delete it (yes/no)", "[Y/n]",
		"Is this okay?", "is that Alright", "OK to proceed?", "Okay to proceed", "may I go ahead", "Can I proceed", "Ready to proceed",
		"Do I have your go-ahead?", "do i have your permission", "Do I have your approval", "\u017fhall i", "o\u212a to proceed", "is that o\u212a")
	pieces := []string{"would you like", " me", " us", " to ", "proceed", "go ahead", "continue", "shall", " i", "should", "do you want",
		"please", "can you", "could you", "confirm", " that", " if", "(yes/no)", "y/n", "is", "this", "ok", "okay", "correct", "alright",
		"may", "can", "ready", "do i have your", "permission", "approval", "go-ahead", "?", " ", "\u017f", "\u212a", "Y", "N", "/"}
	texts = append(texts, madeOf(pieces, 10, 3, 4)...)
	matched := 0
	for _, s := range texts {
		want := reAsk.FindStringIndex(s)
		from := askFrom(s, lowerLine(s, nil))
		var got []int
		if from >= 0 {
			if got = reAsk.FindStringIndex(s[from:]); got != nil {
				got[0], got[1] = got[0]+from, got[1]+from
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("reAsk from askFrom(%q) = %v, on the whole text %v", s, got, want)
		}
		if want != nil {
			matched++
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d questions among the texts", matched)
	}
}

// isRefKey answers what reRefKey answers.
func TestRefKeyAnswersAsTheExpression(t *testing.T) {
	keys := []string{"id", "ID", "Id", "user_id", "USER_ID", "order_ids", "x_number", "ticket", "TicketNo", "issue_url", "orders",
		"reservation_id", "booking", "commit_sha", "sha", "SHA", "branch", "pr", "PR", "url", "URL", "urls", "pr_x", "ids", "idx",
		"s\u017fha", "\u017fha", "boo\u212aing", "", "_id", "_ids", "a_idss", "path", "command", "İD", "ıd"}
	pieces := []string{"id", "ID", "_", "s", "number", "ticket", "issue", "order", "reservation", "booking", "commit", "sha", "branch",
		"pr", "url", "x", "Y", "\u017f", "\u212a", "İ", "ı"}
	keys = append(keys, madeOf(pieces, 4, 5, 6)...)
	matched := 0
	for _, k := range keys {
		want := reRefKey.MatchString(k)
		if got := isRefKey(k); got != want {
			t.Errorf("isRefKey(%q) = %v, the expression says %v", k, got, want)
		}
		if want {
			matched++
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d keys matched", matched)
	}
}

// lastExit answers what the expression run over the whole text answers
// (its last match), on real tool output and on texts made of its pieces.
func TestLastExitAnswersAsTheExpression(t *testing.T) {
	whole := regexp.MustCompile(strings.TrimPrefix(reExit.String(), "^"))
	want := func(text string) (int, bool) {
		ms := whole.FindAllStringSubmatch(text, -1)
		if ms == nil {
			return 0, false
		}
		n, err := strconv.Atoi(ms[len(ms)-1][1])
		return n, err == nil
	}
	texts := corpusLines(t)
	pieces := []string{"exit", "Exit", "EXITED", "exited", " with", " code", " status", "returncode", "ReturnCode", "exit_code", `"`, ":", "=", " ",
		"1", "-2", "0", "127", "x", "\n", "\u017f", "\u212a", "returncodexit", "99999999999999999999"}
	texts = append(texts, madeOf(pieces, 10, 3, 4)...)
	found := 0
	for _, text := range texts {
		gotN, gotOK := lastExit(text)
		wantN, wantOK := want(text)
		if gotN != wantN || gotOK != wantOK {
			t.Fatalf("lastExit(%q) = %d, %v; the expression over the whole text says %d, %v", text, gotN, gotOK, wantN, wantOK)
		}
		if gotOK {
			found++
		}
	}
	if found < 300 {
		t.Fatalf("only %d texts with an exit status", found)
	}
}

// Issue 43: the answer to a question is read on its opening alone
// (replyHead), which the yes and no expressions answer as they do the
// whole reply: on the corpus's lines, and on 20,000 replies made of their
// words, of what may come before them (punctuation, spaces, letters that
// fold to s and k, other scripts) and of padding that moves a word past
// the opening.
func TestAReplyHeadAnswersAsTheWholeReply(t *testing.T) {
	texts := corpusLines(t)
	pieces := []string{"yes", "Yes", "no", "NO", "ok", "o\u212a", "\u017fure", "sure", "that's right", "sounds good", "do not", "hold on",
		"yesterday", "nothing", " ", "...", "!", "\n", "—", "é", "日本", "_", "x", "1", strings.Repeat(".", 70), strings.Repeat(" ", 61), strings.Repeat("—", 30)}
	texts = append(texts, madeOf(pieces, 6, 5, 6)...)
	yes := 0
	for _, text := range texts {
		head := replyHead(text)
		if !strings.HasPrefix(text, head) {
			t.Fatalf("replyHead(%q) = %q, not its opening", text, head)
		}
		for _, re := range []*regexp.Regexp{reYes, reNo} {
			if got, want := re.MatchString(head), re.MatchString(text); got != want {
				t.Fatalf("%s on the head %q of %q: %v; on the whole reply: %v", re, head, text, got, want)
			}
		}
		if reYes.MatchString(text) {
			yes++
		}
	}
	if yes < 1000 {
		t.Fatalf("only %d replies say yes", yes)
	}
}
