package session_test

import (
	"testing"

	"github.com/compactor/compactor/internal/session"
)

func chatOf(texts ...string) []session.Message {
	var out []session.Message
	for i, t := range texts {
		role := session.RoleUser
		if i%2 == 1 {
			role = session.RoleAssistant
		}
		out = append(out, session.Message{Role: role, Content: session.TextContent(t)})
	}
	return out
}

// A chat that writes its speakers into the text reads as named; one that
// does not, or an agent's session, is left as it is.
func TestWithSpeakerNames(t *testing.T) {
	in := chatOf("Caroline: I went to the support group yesterday.", "Melanie: That's great! How was it?",
		"Caroline: It was powerful: Note: bring water next time.", "Mel Smith: Glad you went.")
	got := session.WithSpeakerNames(in)
	want := []struct{ name, text string }{{"Caroline", "I went to the support group yesterday."}, {"Melanie", "That's great! How was it?"},
		{"Caroline", "It was powerful: Note: bring water next time."}, {"Mel_Smith", "Glad you went."}}
	for i, w := range want {
		if got[i].Name != w.name || got[i].Content.Text != w.text {
			t.Fatalf("message %d: %q %q, want %q %q", i, got[i].Name, got[i].Content.Text, w.name, w.text)
		}
	}
	if in[0].Name != "" || in[0].Content.Text != "Caroline: I went to the support group yesterday." {
		t.Fatal("the input was changed")
	}
	for name, msgs := range map[string][]session.Message{
		"labels, not names":        chatOf("Note: the build is red.", "Fixed: it was the cache.", "Note: it is green.", "Fixed: all of it."),
		"most messages plain":      chatOf("Caroline: hi", "hello there", "how are you", "fine thanks"),
		"a chat with an assistant": chatOf("User: hi", "Assistant: hello", "User: fix it", "Assistant: done"),
		"an agent's tool calls":    append(chatOf("Caroline: hi", "Melanie: hello"), session.Message{Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent("ok")}),
	} {
		if out := session.WithSpeakerNames(msgs); out[0].Name != "" {
			t.Errorf("%s: read as named: %+v", name, out[0])
		}
	}
}
