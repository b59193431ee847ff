package tokens_test

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"

	"github.com/compactor/compactor/internal/tokens"
)

// The encodings' expressions, as tiktoken-go compiles them.
var expressions = map[string]string{
	"o200k_base": strings.Join([]string{
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
		`\p{N}{1,3}`,
		` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
		`\s*[\r\n]+`,
		`\s+(?!\S)`,
		`\s+`,
	}, "|"),
	"cl100k_base": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
}

// pieces are what the expression finds in text, in order, as tiktoken-go
// cuts them (runes; invalid UTF-8 read as U+FFFD).
func pieces(t testing.TB, re *regexp2.Regexp, text string) []string {
	runes := []rune(text)
	var out []string
	m, err := re.FindStringMatch(text)
	for ; m != nil && err == nil; m, err = re.FindNextMatch(m) {
		out = append(out, string(runes[m.Index:m.Index+m.Length]))
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// alphabet has a character of every class the expressions name, and the
// edges between them: letters of each case class (Lu, Ll, Lt, Lm, Lo),
// marks of each kind, numbers of each kind, every kind of space (ASCII,
// NEL, no-break, line and paragraph separators, ideographic), the
// contractions' letters in both cases and letters that fold oddly
// (Kelvin, long s, dotted I), line breaks, slashes, punctuation, a
// zero-width joiner, an emoji, U+FFFD.
var alphabet = []rune("aeZ'sStTrReEvVmMlLdD 09\t\n\r\v\f.,/-_\"@$(") // ASCII
var unicodeAlphabet = []rune{0x00A0, 0x0085, 0x2028, 0x2029, 0x3000, 0x1680, 0x202F, 0x0301, 0x0903, 0x20DD, 0x01C5, 0x02B0, 0x4E2D, 0x05D0,
	0x00E9, 0x00C9, 0x216B, 0x00BD, 0x0661, 0x1F600, 0x212A, 0x017F, 0x0130, 0xFFFD, 0x200D, 0x00B7, 0x3001}

func randomTexts(n int) []string {
	rng := rand.New(rand.NewPCG(42, 7))
	all := append(slices.Clone(alphabet), unicodeAlphabet...)
	out := make([]string, 0, n)
	for range n {
		var b strings.Builder
		for range 1 + rng.IntN(24) {
			if rng.IntN(50) == 0 {
				b.WriteByte(0xff) // invalid UTF-8
				continue
			}
			b.WriteRune(all[rng.IntN(len(all))])
		}
		out = append(out, b.String())
	}
	return out
}

// repoTexts are the repository's own documents and Go sources: prose,
// code, tables, JSON.
func repoTexts(t testing.TB) []string {
	var out []string
	for _, glob := range []string{"../../docs/*.md", "../../*.md", "*.go", "../pipeline/*.go", "../../schemas/*.json"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(b))
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d of the repository's files", len(out))
	}
	return out
}

// The pre-tokeniser cuts every text where the encoding's expression does
// (regexp2, as tiktoken-go runs it): random texts over every class the
// expression names, and the repository's documents and sources.
func TestPreTokeniserMatchesTheExpression(t *testing.T) {
	texts := append(randomTexts(20000), repoTexts(t)...)
	texts = append(texts, "", "don't I'LL we'Re", "x  \n\n  y", "  ", "a\r\n\r\n", "1234567", "ǅǅa", "ʰʰ", "é\u0301", " \u0301a", "\u0301", "'S'T", "a'", "a '")
	for enc, expr := range expressions {
		re := regexp2.MustCompile(expr, regexp2.None)
		for _, text := range texts {
			if !utf8.ValidString(text) {
				text = string([]rune(text)) // as the counter reads it
			}
			want, got := pieces(t, re, text), tokens.PreTokens(enc, text)
			if !slices.Equal(got, want) {
				t.Fatalf("%s cuts %q into\n%q, the expression into\n%q", enc, text, got, want)
			}
		}
	}
}

// The fast counter counts what tiktoken-go's encoder does, on the same
// texts, invalid UTF-8 as it is.
func TestBPECountsAsTiktoken(t *testing.T) {
	texts := append(randomTexts(5000), repoTexts(t)...)
	for _, enc := range []string{"o200k_base", "cl100k_base"} {
		c := counter(t, enc)
		for _, text := range texts {
			if got, want := c.CountFast(text), c.CountWhole(text); got != want {
				t.Fatalf("%s counts %q as %d tokens, tiktoken-go as %d", enc, text, got, want)
			}
		}
	}
}

// BenchmarkEncodeNew: chat messages never counted before (no cache hit),
// by the fast counter and by tiktoken-go's encoder.
func BenchmarkEncodeNew(b *testing.B) {
	c := counter(b, "o200k_base")
	const text = "[b-alone-00 turn %d] My booking REF-b-alone-00-%d: can I move the flight to day 4, keep seat 4A and add a bag of 13 kg?"
	for _, way := range []struct {
		name  string
		count func(string) int
	}{{"fast", c.CountFast}, {"tiktoken-go", c.CountWhole}} {
		b.Run(way.name, func(b *testing.B) {
			i := 0
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				i++
				way.count(strings.Replace(text, "%d", strconv.Itoa(i), 2))
			}
		})
	}
}
