package tokens

import (
	"unicode"
	"unicode/utf8"
)

// The encoder's pre-tokeniser, written out: tiktoken splits a text into
// pieces with a regular expression before byte-pair encoding each, and
// tiktoken-go runs it with regexp2, a backtracking engine, at some 1.5 MB/s
// (70 µs for a 115-byte chat message: a replica counting the messages its
// compactions and preparations read spent a quarter of its time there).
// The functions below find the same pieces in one pass: each returns where
// the piece that starts at i ends, following the expression's alternatives
// in order, with its greedy quantifiers backtracked as the engine does.
// TestPreTokeniserMatchesTheExpression checks them against regexp2 on
// every class of character the expressions name.
//
// Both take valid UTF-8 (see validUTF8) and i < len(s).

// next is a pre-tokeniser: the end of the piece that starts at i.
type next func(s string, i int) int

// Character classes of the expressions, by Go's unicode tables (which
// regexp2's \p{..} and \s are).
func isL(r rune) bool {
	return r < utf8.RuneSelf && asciiLetter(r) || r >= utf8.RuneSelf && unicode.IsLetter(r)
}
func isN(r rune) bool { return r >= '0' && r <= '9' || r >= utf8.RuneSelf && unicode.IsNumber(r) }
func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || r >= '\t' && r <= '\r'
	}
	return unicode.IsSpace(r)
}

func asciiLetter(r rune) bool { return r|0x20 >= 'a' && r|0x20 <= 'z' }

// isUpper is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], isLower
// [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func isUpper(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'A' && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func isLower(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 'a' && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// isPrefix is [^\r\n\p{L}\p{N}], isPunct [^\s\p{L}\p{N}].
func isPrefix(r rune) bool { return r != '\r' && r != '\n' && !isL(r) && !isN(r) }
func isPunct(r rune) bool  { return !isS(r) && !isL(r) && !isN(r) }

func at(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run is the end of the run of characters in class from i.
func run(s string, i int, class func(rune) bool) int {
	for {
		r, n := at(s, i)
		if n == 0 || !class(r) {
			return i
		}
		i += n
	}
}

// contraction is the end of (?i:'s|'t|'re|'ve|'m|'ll|'d) at i, or i.
// Case-insensitive as regexp2 is: the text's letters lowered.
func contraction(s string, i int) int {
	if i+1 >= len(s) || s[i] != '\'' {
		return i
	}
	letter := func(j int) (rune, int) {
		r, n := at(s, j)
		return unicode.ToLower(r), n
	}
	r1, n1 := letter(i + 1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + 1 + n1
	case 'r', 'v', 'l':
		want := 'e'
		if r1 == 'l' {
			want = 'l'
		}
		if r2, n2 := letter(i + 1 + n1); n2 > 0 && r2 == want {
			return i + 1 + n1 + n2
		}
	}
	return i
}

// spaces is what \s*[\r\n]+, \s+(?!\S) and \s+ match at i, in that order
// (-1: none): the whitespace run up to its last line break; the run but
// its last character when a non-space follows it; the run.
func spaces(s string, i int) int {
	end := run(s, i, isS)
	if end == i {
		return -1
	}
	for j := end - 1; j >= i; j-- {
		if s[j] == '\r' || s[j] == '\n' {
			return j + 1
		}
	}
	if end == len(s) {
		return end
	}
	// The run's last character given back, so that a space is ahead.
	_, last := utf8.DecodeLastRuneInString(s[i:end])
	if end-last > i {
		return end - last
	}
	return end
}

// numbers is \p{N}{1,3} at i (-1: none).
func numbers(s string, i int) int {
	j := i
	for k := 0; k < 3; k++ {
		r, n := at(s, j)
		if n == 0 || !isN(r) {
			break
		}
		j += n
	}
	if j == i {
		return -1
	}
	return j
}

// punct is ` ?[^\s\p{L}\p{N}]+` then trail* at i (-1: none).
func punct(s string, i int, trail func(rune) bool) int {
	j := i
	if s[j] == ' ' {
		if r, n := at(s, j+1); n > 0 && isPunct(r) {
			j++
		}
	}
	if r, n := at(s, j); n == 0 || !isPunct(r) {
		return -1
	}
	return run(s, run(s, j, isPunct), trail)
}

// o200kNext is o200k_base's
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
func o200kNext(s string, i int) int {
	r, n := at(s, i)
	starts := []int{i}
	if isPrefix(r) {
		starts = []int{i + n, i} // the optional prefix taken first
	}
	for _, j := range starts {
		if e := upperLower(s, j); e >= 0 {
			return contraction(s, e)
		}
	}
	for _, j := range starts {
		if e := run(s, j, isUpper); e > j {
			return contraction(s, run(s, e, isLower))
		}
	}
	if e := numbers(s, i); e >= 0 {
		return e
	}
	if e := punct(s, i, func(r rune) bool { return r == '\r' || r == '\n' || r == '/' }); e >= 0 {
		return e
	}
	if e := spaces(s, i); e >= 0 {
		return e
	}
	return i + n // (no alternative matches: every character is in one)
}

// upperLower is [upper]*[lower]+ at j (-1: none). The engine gives the
// upper run back a character at a time until a lower character follows:
// the one after the run, whose lower run ends the match, else the run's
// last character that is lower too (Lm, Lo, M), which ends it.
func upperLower(s string, j int) int {
	lastLower := -1 // the end of the run's last character that is lower
	k := j
	for {
		r, n := at(s, k)
		if n == 0 || !isUpper(r) {
			if n > 0 && isLower(r) {
				return run(s, k, isLower)
			}
			return lastLower
		}
		k += n
		if isLower(r) {
			lastLower = k
		}
	}
}

// cl100kNext is cl100k_base's
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//	| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func cl100kNext(s string, i int) int {
	if e := contraction(s, i); e > i {
		return e
	}
	r, n := at(s, i)
	if isPrefix(r) {
		if r2, n2 := at(s, i+n); n2 > 0 && isL(r2) {
			return run(s, i+n, isL)
		}
	}
	if isL(r) {
		return run(s, i, isL)
	}
	if e := numbers(s, i); e >= 0 {
		return e
	}
	if e := punct(s, i, func(r rune) bool { return r == '\r' || r == '\n' }); e >= 0 {
		return e
	}
	if e := spaces(s, i); e >= 0 {
		return e
	}
	return i + n
}
