package recall

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/kljensen/snowball/english"
)

// Terms are what a text is indexed and searched by:
//   - its words, lower-cased, stop words left out, English words stemmed
//     (Porter2: "visited", "visits" and "visiting" are one term), digits
//     kept as they are;
//   - each identifier whole as well as in its words: a run of letters and
//     digits joined by '.', '_', '-', '/', ':' or '@' ("src/pkg/parser.c",
//     "ORD-1234", "user_id"), lower-cased, so a search for a file, an
//     order or a function finds it by its exact name first; a path's
//     segments that are identifiers too ("parser.c").
func Terms(text string) []string {
	return appendTerms(nil, text, nil)
}

// appendTerms adds text's terms to out, and each word (in text's order)
// to words when it is not nil.
func appendTerms(out []string, text string, words *pairer) []string {
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		if !isWordRune(r) {
			i += size
			continue
		}
		j, parts := i, 1
		for j < len(text) {
			r, size := utf8.DecodeRuneInString(text[j:])
			if isWordRune(r) {
				j += size
				continue
			}
			if isJoiner(r) && j+size < len(text) {
				if next, _ := utf8.DecodeRuneInString(text[j+size:]); isWordRune(next) {
					j += size
					parts++
					continue
				}
			}
			break
		}
		ident := text[i:j]
		if parts > 1 {
			out = append(out, strings.ToLower(ident))
			if strings.Contains(ident, "/") {
				// A path's segments whole too: a file is sought by its
				// name more often than by its path.
				for _, seg := range strings.Split(ident, "/") {
					if strings.ContainsAny(seg, "._-:@") && seg != ident {
						out = append(out, strings.ToLower(seg))
					}
				}
			}
		}
		out = appendWords(out, ident, words)
		i = j
	}
	return out
}

// appendWords adds the words of an identifier (runs of letters and
// digits), stemmed, without stop words; to words too (when not nil).
func appendWords(out []string, ident string, words *pairer) []string {
	start := -1
	for j, r := range ident + " " {
		if isWordRune(r) {
			if start < 0 {
				start = j
			}
			continue
		}
		if start >= 0 {
			if w := word(ident[start:j]); w != "" {
				out = append(out, w)
				words.add(w)
			}
			start = -1
		}
	}
	return out
}

// word is one word as a term ("" for a stop word).
func word(w string) string {
	w = strings.ToLower(w)
	if stopWords[w] {
		return ""
	}
	if len(w) > 2 && isASCIILetters(w) {
		return english.Stem(w, true)
	}
	return w
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

func isJoiner(r rune) bool {
	return r == '.' || r == '_' || r == '-' || r == '/' || r == ':' || r == '@'
}

func isASCIILetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}

// stopWords are English words too common to say what a message is about.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`a an the and or but if then else of to in on at by for with from as is are was were be been being
		am do does did doing have has had having it its it's this that these those there here i me my mine myself you your yours
		yourself we us our ours he him his she her hers they them their theirs what which who whom whose when where why how
		not no nor so than too very can could would should will shall may might must just also about into over under again
		all any both each few more most other some such only own same s t don't isn't aren't wasn't weren't i'm you're
		that's what's let's up down out off then once`) {
		m[w] = true
	}
	return m
}()
