package ledger

import (
	"encoding/json"
	"testing"

	"github.com/compactor/compactor/internal/demo"
)

// BenchmarkExtract reads the bundled run (an airline agent's 60 messages)
// as a compaction's ledger does.
func BenchmarkExtract(b *testing.B) {
	var file struct {
		Messages []struct {
			Role       string `json:"role"`
			Content    string `json:"content"`
			ToolCallID string `json:"tool_call_id"`
			ToolCalls  []struct {
				ID       string `json:"id"`
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(demo.Trajectory, &file); err != nil {
		b.Fatal(err)
	}
	msgs := make([]Message, len(file.Messages))
	for i, m := range file.Messages {
		msgs[i] = Message{Role: m.Role, Text: m.Content, Seq: int64(i + 1), ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msgs[i].ToolCalls = append(msgs[i].ToolCalls, Call{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	if len(msgs) < 20 {
		b.Fatalf("%d messages", len(msgs))
	}
	for b.Loop() {
		Extract(msgs)
	}
}
