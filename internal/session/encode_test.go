package session

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// AppendJSON writes what json.Marshal writes, for every message it takes.
func TestAppendJSONWritesAsMarshal(t *testing.T) {
	texts := []string{"", "plain", "line\nbreak\t\"q\" \\ / <b>&amp;</b>", "\x00\x01\x1f\x7f", "é 日本 😀", "\u2028\u2029", "bad \xff\xfe utf8", "\xe2\x82"}
	r := rand.New(rand.NewPCG(5, 6))
	pick := func() string {
		if r.IntN(3) == 0 {
			// Bytes of all kinds.
			b := make([]byte, r.IntN(12))
			for i := range b {
				b[i] = byte(r.IntN(256))
			}
			return string(b)
		}
		return texts[r.IntN(len(texts))]
	}
	taken := 0
	for i := range 20000 {
		m := Message{ID: pick(), Seq: int64(r.IntN(3)), Role: Role(pick()), Content: Content{Text: pick(), Empty: r.IntN(2) == 0},
			Name: pick(), ToolCallID: pick(), Tokens: r.IntN(3) - 1, IsCompaction: r.IntN(4) == 0, SummarisedBy: pick()}
		for range r.IntN(3) {
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: pick(), Type: pick(), Function: FunctionCall{Name: pick(), Arguments: pick()}})
		}
		if i%10 == 0 {
			m.Content = TextContent("x")
			m.Content.Parts = []json.RawMessage{json.RawMessage(`{"type":"text","text":"x"}`)}
		}
		want, err := json.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := AppendJSON([]byte("prefix"), &m)
		if !ok {
			if string(got) != "prefix" {
				t.Fatalf("AppendJSON refused %+v but wrote %q", m, got)
			}
			continue
		}
		taken++
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("AppendJSON(%+v)\n= %s\nwant %s", m, got[6:], want)
		}
	}
	if taken < 15000 {
		t.Fatalf("AppendJSON took %d of 20,000 messages", taken)
	}
}
