package kvstore

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/session"
)

// An entry written from its messages' JSON is the entry's JSON, with and
// without messages stored in chunks.
func TestMarshalEntryIsTheEntrysJSON(t *testing.T) {
	s := &Sessions{chunk: 4 << 10}
	msgs := []session.Message{
		{ID: "a", Seq: 7, Role: session.RoleUser, Content: session.TextContent("a \"quoted\" <question>\n")},
		{ID: "b", Seq: 8, Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Type: "function", Function: session.FunctionCall{Name: "ls", Arguments: "{}"}}}},
		{ID: "c", Seq: 9, Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent(strings.Repeat("log line\n", 2000))},
	}
	for _, n := range []int{1, 2, 3} {
		e, _, whole, err := s.encodeEntry(msgs[:n])
		if err != nil {
			t.Fatal(err)
		}
		if n == 3 && e.Msgs[2].Blob == nil {
			t.Fatal("the large message is not in chunks")
		}
		want, _ := json.Marshal(e)
		if got := marshalEntry(e, whole); !bytes.Equal(got, want) {
			t.Fatalf("%d messages:\n got %s\nwant %s", n, got, want)
		}
	}
}
