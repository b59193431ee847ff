package gateway

import (
	"encoding/json"
	"strings"
	"testing"
)

// anthropicBody is a Claude Code-shaped conversation: an image, thinking
// blocks with their signatures, a user message of a tool result and a
// text, and cache_control breakpoints.
const anthropicBody = `{"model":"claude-sonnet-4-5","max_tokens":1024,"system":[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}],"messages":[
{"role":"user","content":[{"type":"text","text":"the task"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},
{"role":"assistant","content":[{"type":"thinking","thinking":"let me read","signature":"sig-1"},{"type":"text","text":"reading"},{"type":"tool_use","id":"tu1","name":"read","input":{"path":"a"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"contents of a"},{"type":"text","text":"a note","cache_control":{"type":"ephemeral"}}]},
{"role":"assistant","content":[{"type":"thinking","thinking":"now b","signature":"sig-2"},{"type":"tool_use","id":"tu2","name":"read","input":{"path":"b"}}]},
{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu2","content":"contents of b","cache_control":{"type":"ephemeral"}}]}]}`

// TestRenderKeepsWhatTheRuntimeSent: the raw tail goes upstream as the
// runtime sent it (thinking signatures, images, cache_control), a user
// message cut between its tool result and its text keeps only the text,
// and a cleared result keeps its block's other fields.
func TestRenderKeepsWhatTheRuntimeSent(t *testing.T) {
	c, err := messagesAPI.read([]byte(anthropicBody), newElementCache(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	roles := []string{}
	for _, m := range c.msgs {
		roles = append(roles, string(m.Role))
	}
	if got := strings.Join(roles, " "); got != "user assistant tool user assistant tool" {
		t.Fatalf("messages %s", got)
	}
	if len(c.msgs[0].Content.Parts) != 2 {
		t.Fatalf("the image is not a part of the first message: %+v", c.msgs[0].Content)
	}
	// The summary stands for messages 0-2; the tail starts at the note.
	elems, err := c.render([]item{{summary: "S"}, {msg: 3}, {msg: 4}, {msg: 5}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"content":[{"text":"S","type":"text"}],"role":"user"}`,
		`{"content":[{"type":"text","text":"a note","cache_control":{"type":"ephemeral"}}],"role":"user"}`,
		`{"role":"assistant","content":[{"type":"thinking","thinking":"now b","signature":"sig-2"},{"type":"tool_use","id":"tu2","name":"read","input":{"path":"b"}}]}`,
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"tu2","content":"contents of b","cache_control":{"type":"ephemeral"}}]}`,
	}
	checkElems(t, elems, want)
	// The first message pinned, the last result cleared.
	elems, err = c.render([]item{{msg: 0}, {summary: "S"}, {msg: 4}, {msg: 5, placeholder: "[cleared]"}})
	if err != nil {
		t.Fatal(err)
	}
	want = []string{
		`{"role":"user","content":[{"type":"text","text":"the task"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]}`,
		`{"content":[{"text":"S","type":"text"}],"role":"user"}`,
		want[2],
		`{"content":[{"cache_control":{"type":"ephemeral"},"content":"[cleared]","tool_use_id":"tu2","type":"tool_result"}],"role":"user"}`,
	}
	checkElems(t, elems, want)
	// The body keeps every other field as sent.
	body, err := c.body(elems)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		t.Fatal(err)
	}
	if string(fields["system"]) != `[{"type":"text","text":"sys","cache_control":{"type":"ephemeral"}}]` || string(fields["max_tokens"]) != "1024" {
		t.Fatalf("the body's other fields: %s", body)
	}
}

// TestResponsesReasoningGoesWithItsCall: a reasoning item goes upstream
// with the call after it, and calls in a row are one message.
func TestResponsesReasoningGoesWithItsCall(t *testing.T) {
	body := `{"model":"gpt-5","input":[{"role":"developer","content":"sys"},{"role":"user","content":"task"},
{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"enc"},
{"type":"function_call","call_id":"c1","name":"read","arguments":"{}"},{"type":"function_call","call_id":"c2","name":"read","arguments":"{}"},
{"type":"function_call_output","call_id":"c1","output":"one"},{"type":"function_call_output","call_id":"c2","output":"two"},
{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]}`
	c, err := responsesAPI.read([]byte(body), newElementCache(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.head) != 1 || len(c.msgs) != 5 || len(c.msgs[1].ToolCalls) != 2 {
		t.Fatalf("head %d, messages %d: %+v", len(c.head), len(c.msgs), c.msgs)
	}
	elems, err := c.render([]item{{summary: "S"}, {msg: 1}, {msg: 2}, {msg: 3}, {msg: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if len(elems) != 8 || !strings.Contains(string(elems[2]), `"encrypted_content":"enc"`) || !strings.Contains(string(elems[3]), `"call_id":"c1"`) {
		t.Fatalf("rendered %s", elems)
	}
}

func checkElems(t *testing.T, got []json.RawMessage, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d elements, want %d: %s", len(got), len(want), got)
	}
	for i := range want {
		var a, b any
		if err := json.Unmarshal(got[i], &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(want[i]), &b); err != nil {
			t.Fatal(err)
		}
		ga, _ := json.Marshal(a)
		gb, _ := json.Marshal(b)
		if string(ga) != string(gb) {
			t.Errorf("element %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// TestAsIs: what the session cannot hold goes upstream as it came.
func TestAsIs(t *testing.T) {
	for _, c := range []struct {
		a    *api
		body string
		why  string
	}{
		{chatAPI, `{"model":"gpt-3.5-turbo","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},{"role":"function","name":"f","content":"1"}]}`, "legacy_functions"},
		{responsesAPI, `{"model":"gpt-5","previous_response_id":"resp_1","input":"and then?"}`, "stateful"},
		{responsesAPI, `{"model":"gpt-5","conversation":"conv_1","input":[{"role":"user","content":"hi"}]}`, "stateful"},
	} {
		conv, err := c.a.read([]byte(c.body), newElementCache(1<<20))
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
		} else if conv.asIs != c.why {
			t.Errorf("%s: as is %q, want %q", c.body, conv.asIs, c.why)
		}
	}
}

// TestStatesBounded: the states kept stay within their count, the least
// recently used dropped.
func TestStatesBounded(t *testing.T) {
	s := newStates(2)
	a := s.get("t", "a")
	s.get("t", "b")
	s.get("t", "a")
	s.get("t", "c") // drops b
	if s.order.Len() != 2 || s.get("t", "a") != a {
		t.Fatalf("%d states kept; a kept: %v", s.order.Len(), s.get("t", "a") == a)
	}
	if _, ok := s.byKey["t\x00b"]; ok {
		t.Fatal("b was kept")
	}
}
