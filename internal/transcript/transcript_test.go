package transcript_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
)

func TestParseFormats(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int
	}{
		{"array", `[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}]`, 3},
		{"object", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}}]}]}`, 2},
		{"json lines", "{\"role\":\"user\",\"content\":\"a\"}\n\n{\"role\":\"assistant\",\"content\":\"b\"}\n", 2},
		{"one line", `{"role":"user","content":"a"}`, 1},
		{"swe-agent ids", `{"history":[{"role":"tool","content":"x","tool_call_ids":["c9"]}]}`, 1},
		{"bom", "\ufeff[{\"role\":\"user\",\"content\":\"a\"}]", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, err := transcript.Parse([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) != tt.want {
				t.Fatalf("%d messages, want %d", len(msgs), tt.want)
			}
		})
	}
	msgs, _ := transcript.Parse([]byte(tests[1].in))
	if msgs[1].Content.Text != "a" || len(msgs[1].Content.Parts) != 2 {
		t.Fatalf("content parts: %+v", msgs[1].Content)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want error
	}{
		{"empty", "", transcript.ErrFormat},
		{"not json", "hello", transcript.ErrFormat},
		{"object without messages", `{"foo":1}`, transcript.ErrFormat},
		{"bad role", `[{"role":"robot","content":"x"}]`, session.ErrInvalid},
		{"tool without id", `[{"role":"tool","content":"x"}]`, session.ErrInvalid},
		{"invalid utf8", "[{\"role\":\"user\",\"content\":\"\xff\"}]", transcript.ErrFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := transcript.Parse([]byte(tt.in))
			if err == nil {
				t.Fatal("want an error")
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
		})
	}
}

// The datasets convert to valid chat sessions with paired tool calls.
func TestLoadDataDir(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("skipping: %s is absent", dir)
	}
	convs, err := transcript.LoadDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	bySource := map[string]int{}
	for _, c := range convs {
		bySource[c.Source]++
		calls := map[string]bool{}
		for _, m := range c.Messages {
			for _, tc := range m.ToolCalls {
				calls[tc.ID] = true
			}
			if m.Role == session.RoleTool && !calls[m.ToolCallID] {
				t.Errorf("%s: tool result %s before or without its call", c.Name, m.ToolCallID)
			}
		}
		if len(c.Messages) < 5 {
			t.Errorf("%s: only %d messages", c.Name, len(c.Messages))
		}
	}
	want := map[string]int{"locomo": 8, "tau-bench": 160, "swe-agent": 3, "openhands": 2}
	for src, n := range want {
		if bySource[src] != n {
			t.Errorf("%s: %d conversations, want %d", src, bySource[src], n)
		}
	}
	for _, c := range convs {
		if c.Source == "locomo" && (len(c.QA) == 0 || len(c.DiaIndex) != len(c.Messages)) {
			t.Errorf("%s: %d QA, %d dia ids for %d messages", c.Name, len(c.QA), len(c.DiaIndex), len(c.Messages))
		}
	}
}
