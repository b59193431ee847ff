package ledger

import (
	"bytes"
	"slices"
)

// A long tool output is mostly lines that report nothing, and running
// reErrorLine and reTestLine on each (alternatives that begin with ".*")
// was most of a compaction's own work on a 1,000-message session (issue
// 43). Each alternative of the two expressions begins with, or holds, a
// fixed word; errorLine and testLine run an expression only on a line
// that holds one where the alternative needs it, so they answer what the
// expression alone answers.

// lowerLine is line in ASCII lower case, in buf (reused).
func lowerLine(line string, buf []byte) []byte {
	b := slices.Grow(buf[:0], len(line))[:len(line)]
	for i := range b {
		b[i] = lowerASCII[line[i]]
	}
	return b
}

// lowerASCII is each byte with ASCII letters lower-cased.
var lowerASCII = func() (t [256]byte) {
	for i := range t {
		c := byte(i)
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		t[i] = c
	}
	return t
}()

// foldsOutsideASCII reports whether l holds a character that (?i) folds to
// an ASCII letter (the long s to s, the Kelvin sign to k): the fixed words
// below are compared in ASCII, so such a line goes to the expression.
func foldsOutsideASCII(l []byte) bool {
	return bytes.Contains(l, []byte("\u017f")) || bytes.Contains(l, []byte("\u212a"))
}

func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// mayBeError reports whether the lower-cased line l could match
// reErrorLine: it holds the fixed part of one of its alternatives where
// that alternative has it.
func mayBeError(l []byte) bool {
	i := 0
	for i < len(l) && (isWordByte(l[i]) || l[i] == '.') {
		i++
	}
	// \w+(\.\w+)*(Error|Exception)\b, error(\[\w+\])?:, Error: — all in
	// the leading run of word characters and dots.
	if lead := l[:i]; bytes.Contains(lead, []byte("error")) || bytes.Contains(lead, []byte("exception")) {
		return true
	}
	for _, p := range []string{"fatal:", "panic:", "e  ", "failed"} {
		if bytes.HasPrefix(l, []byte(p)) {
			return true
		}
	}
	if bytes.IndexByte(l, ':') >= 0 {
		for _, w := range []string{": command not found", ": no such file or directory", ": error: ", ": fatal error: "} {
			if bytes.Contains(l, []byte(w)) {
				return true
			}
		}
	}
	return bytes.Contains(l, []byte("segmentation fault")) || foldsOutsideASCII(l)
}

// mayBeTest reports whether the lower-cased line l could match
// reTestLine: every alternative begins with one of a few words or a
// digit.
func mayBeTest(l []byte) bool {
	if len(l) == 0 {
		return false
	}
	if c := l[0]; c == '=' || '0' <= c && c <= '9' {
		return true
	}
	for _, p := range []string{"ok", "fail", "--- fail: ", "ran ", "test"} {
		if bytes.HasPrefix(l, []byte(p)) {
			return true
		}
	}
	return foldsOutsideASCII(l)
}

// errorLine reports whether line (trimmed) matches reErrorLine; l is its
// lowerLine.
func errorLine(line string, l []byte) bool {
	return mayBeError(l) && reErrorLine.MatchString(line)
}

// testLine reports whether line (trimmed) matches reTestLine; l is its
// lowerLine.
func testLine(line string, l []byte) bool {
	return mayBeTest(l) && reTestLine.MatchString(line)
}

// askWords are the fixed words of reAsk: each of its alternatives holds
// one ("ok(ay)? to proceed" holds "proceed", "is that ok" "is that ").
var askWords = []string{"proceed", "go ahead", "continue", "shall i", "confirm", "(yes/no)", "y/n", "is that ", "is this ",
	"permission", "approval", "go-ahead"}

// askPrefix bounds what an alternative of reAsk holds before its fixed
// word ("would you like us to " before "proceed": 21 bytes).
const askPrefix = 32

// askFrom is where in text (l its lower case) reAsk's leftmost match can
// begin, or -1 when it cannot match: every match holds one of askWords at
// most askPrefix bytes from its start, so none begins before the first
// word less askPrefix — moved back to where an ASCII byte other than a
// word character precedes it (or the text's start), where \b answers as
// in the whole text. A question is looked for only from there (the
// expression run at every place of 400 bytes was a fifth of a ledger's
// work on an agent that asks before each change).
func askFrom(text string, l []byte) int {
	if foldsOutsideASCII(l) {
		return 0
	}
	first := -1
	for _, w := range askWords {
		if i := bytes.Index(l, []byte(w)); i >= 0 && (first < 0 || i < first) {
			first = i
		}
	}
	if first < 0 {
		return -1
	}
	i := max(first-askPrefix, 0)
	for i > 0 && (text[i-1] >= 0x80 || isWordByte(text[i-1])) {
		i--
	}
	return i
}
