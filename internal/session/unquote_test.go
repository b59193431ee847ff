package session

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

func checkUnquote(t *testing.T, lit []byte) bool {
	t.Helper()
	got, ok := Unquote(lit)
	var want string
	err := json.Unmarshal(lit, &want)
	if ok && (err != nil || got != want) {
		t.Fatalf("Unquote(%q) = %q, encoding/json %q (%v)", lit, got, want, err)
	}
	return ok
}

// unquote answers only what encoding/json answers, and answers the usual
// texts (escapes included).
func TestUnquoteAnswersAsEncodingJSON(t *testing.T) {
	taken := 0
	for _, s := range []string{"", "plain", "line\nbreak\ttab \"quoted\" back\\slash /", "\x00\x1f", "é ü 日本 😀", "\u2028\u2029", "<html>&amp;"} {
		b, _ := json.Marshal(s)
		if !checkUnquote(t, b) {
			t.Errorf("unquote refused %q, which encoding/json wrote", b)
		}
		taken++
	}
	for _, lit := range []string{`"\/"`, `"\u00e9\u0041"`, `"\ud83d\ude00"`, `"\uD83D\uDE00x"`, `"\ud83d"`, `"\ude00\ud83d"`, `"\ud83dx"`,
		`"\u12"`, `"\x41"`, `"a\"`, `"a"b"`, "\"tab\there\"", "\"\xff\"", `"\ufffd"`, `"`, `x`, `"\u0000"`, `"\uDBFF\uDFFF"`} {
		checkUnquote(t, []byte(lit))
	}
	// Literals made of the pieces of JSON strings, at random.
	pieces := []string{"a", "é", "😀", `\n`, `\"`, `\\`, `\/`, `\u0041`, `\ud83d`, `\ude00`, `\uZZZZ`, `\q`, "\t", "\xff", "\xe2\x82", `"`, " ", `\u`, `\`}
	r := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
		b := []byte{'"'}
		for range r.IntN(8) {
			b = append(b, pieces[r.IntN(len(pieces))]...)
		}
		b = append(b, '"')
		if checkUnquote(t, b) {
			taken++
		}
	}
	if taken < 10000 {
		t.Fatalf("unquote took only %d literals", taken)
	}
}

func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"a\nb"`, `"\ud83d\ude00"`, `"\u00e9"`, "\"\xff\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkUnquote(t, b) })
}
