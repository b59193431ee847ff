package transcript_test

import (
	"testing"
	"unicode/utf8"

	"github.com/compactor/compactor/internal/transcript"
)

// FuzzParse: any input either parses into valid messages or is refused with
// an error; it never panics and never yields invalid UTF-8.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		`[{"role":"user","content":"hi"}]`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
		"{\"role\":\"user\",\"content\":\"a\"}\n{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}",
		`{"history":[{"role":"tool","tool_call_ids":["x"],"content":"y"}]}`,
		"[", "{}", "\xff", `[{"role":"user","content":[1,2]}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, err := transcript.Parse(data)
		if err != nil {
			return
		}
		for i := range msgs {
			if err := msgs[i].Validate(); err != nil {
				t.Fatalf("Parse returned an invalid message %d: %v", i, err)
			}
			if !utf8.ValidString(msgs[i].Content.Text) {
				t.Fatalf("message %d has invalid UTF-8", i)
			}
		}
	})
}
