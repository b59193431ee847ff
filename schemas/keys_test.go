package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// CheckKeys refuses a JSON value with an object that names a key twice:
// encoding/json keeps the last, and a body that says two things says
// neither.
func checkKeysTokens(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	return walkKeys(dec, "$")
}

func walkKeys(dec *json.Decoder, at string) error {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return nil // a syntax error: the decode says it
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil
			}
			key, _ := k.(string)
			if seen[key] {
				return fmt.Errorf("%s: the key %q is given twice", at, cut(key))
			}
			seen[key] = true
			if err := walkKeys(dec, at+"."+cut(key)); err != nil {
				return err
			}
		}
		_, _ = dec.Token() // }
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if err := walkKeys(dec, at+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, _ = dec.Token() // ]
	}
	return nil
}

// TestCheckKeysAgreesWithTheTokenWalk: the byte scanner answers as the
// walk of encoding/json's tokens it replaced (kept here as the oracle), on
// the repo's schemas and examples, hand-made cases (duplicates at every
// depth, escaped keys, syntax errors) and thousands of mutations of them.
func TestCheckKeysAgreesWithTheTokenWalk(t *testing.T) {
	cases := []string{
		`{"a":1,"a":2}`, `{"a":{"b":1,"b":2}}`, `[{"x":1},{"x":1,"x":2}]`, `{"\u0061":1,"a":2}`, `{"a\"b":1,"a\"b":2}`,
		`{"a":[1,2,{"c":3,"d":[{"e":1,"e":2}]}]}`, `{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k1":0}`,
		`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":0}`, `{"a":1,"b":2}`, `[]`, `{}`, `"x"`, `12`, `null`,
		`{"a":1,`, `{"a" 1}`, `{"a":1,"a"`, `[1,2`, `{"a":tru}`, `{"a":"x\\"}`, ``, ` `, `{"a":1}{"a":1}`, `{"a":{},"a":[]}`,
		`{"session_id":"other","session_id":"h","messages":[]}`, `{"messages":[{"role":"user","content":"x","content":"y"}]}`,
	}
	files, _ := filepath.Glob("*.json")
	cases = append(cases, appendBody)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, string(b))
	}
	r := rand.New(rand.NewPCG(1, 2))
	seeds := len(cases)
	for range 5000 {
		b := []byte(cases[r.IntN(seeds)])
		if len(b) == 0 {
			continue
		}
		switch r.IntN(3) {
		case 0: // cut it
			b = b[:r.IntN(len(b))]
		case 1: // repeat a piece of it inside itself
			i, j := r.IntN(len(b)), r.IntN(len(b))
			i, j = min(i, j), max(i, j)
			k := r.IntN(len(b))
			b = append(append(append([]byte{}, b[:k]...), b[i:j]...), b[k:]...)
		default: // change a byte
			b[r.IntN(len(b))] = `{}[]",:a\ 1`[r.IntN(11)]
		}
		cases = append(cases, string(b))
	}
	dups := 0
	for _, c := range cases {
		got := CheckKeys([]byte(c))
		// The walk may loop on a syntax error (dec.More after it): only
		// a valid value is compared, and the scanner must end on the
		// others (it answers a key given twice before any syntax error).
		if !json.Valid([]byte(c)) {
			if got != nil && !bytes.Contains([]byte(c), []byte(`"`)) {
				t.Errorf("%q: %v on an invalid value without keys", c, got)
			}
			continue
		}
		want := checkKeysTokens([]byte(c))
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Errorf("%q: got %v, want %v", c, got, want)
		}
		if got != nil {
			dups++
		}
	}
	if dups < 10 {
		t.Fatalf("only %d of %d cases had a duplicate key: the test tries too little", dups, len(cases))
	}
}

func BenchmarkCheckKeys(b *testing.B) {
	body := []byte(appendBody)
	b.Run("scanner", func(b *testing.B) {
		for b.Loop() {
			_ = CheckKeys(body)
		}
	})
	b.Run("tokens", func(b *testing.B) {
		for b.Loop() {
			_ = checkKeysTokens(body)
		}
	})
}

// appendBody is a session.append as a runtime sends it.
const appendBody = `{"session_id":"s-1","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",` +
	`"function":{"name":"get_reservation_details","arguments":"{\"reservation_id\": \"4WQ150\"}"}}]},{"role":"tool","tool_call_id":"call_1",` +
	`"content":"{\"reservation_id\": \"4WQ150\", \"user_id\": \"chen_jackson_3290\", \"origin\": \"DFW\", \"destination\": \"LAX\", ` +
	`\"flight_type\": \"round_trip\", \"cabin\": \"business\", \"flights\": [{\"origin\": \"DFW\", \"destination\": \"LAX\", ` +
	`\"flight_number\": \"HAT170\", \"date\": \"2024-05-22\", \"price\": 883}], \"passengers\": [{\"first_name\": \"Raj\", ` +
	`\"last_name\": \"Khan\", \"dob\": \"1972-05-19\"}], \"payment_history\": [{\"payment_id\": \"gift_card_3576581\", \"amount\": 4428}]}"},` +
	`{"role":"assistant","content":"Your reservation 4WQ150 is a round trip from DFW to LAX in business class."}]}`
