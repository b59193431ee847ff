package app_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/natstest"
)

// Issue 42, "accepted although a provider or the README refuses it": each
// input is refused (400, not_applied) with an error that names what is
// wrong in the body's own terms (no Go type, no 10,000-character echo),
// and nothing is stored.
func TestHostileInputIsRefused(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), nil, nil)
	nc, _ := natstest.Connect(t, srv)
	if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": "h", "context_limit": 3000, "messages": []map[string]any{
		{"role": "system", "content": "an agent"},
		{"id": "a1", "role": "assistant", "tool_calls": []map[string]any{{"id": "c1", "type": "function", "function": map[string]any{"name": "ls", "arguments": "{}"}}}}}}, nil); code != "" {
		t.Fatalf("create: %s", code)
	}
	call1 := map[string]any{"id": "c2", "type": "function", "function": map[string]any{"name": "ls", "arguments": "{}"}}
	long := strings.Repeat("x", 10_000)
	for _, tc := range []struct {
		name, subject, body, want string
	}{
		{"a user message while a call waits", contract.SubjectAppend, `{"session_id":"h","messages":[{"role":"user","content":"next"}]}`, `"c1"`},
		{"a call never answered in a create", contract.SubjectCreate, `{"session_id":"h2","messages":[{"role":"assistant","tool_calls":[` + mustJSON(call1) + `]},{"role":"user","content":"hi"}]}`, `"c2"`},
		{"two calls of one id", contract.SubjectCreate, `{"session_id":"h2","messages":[{"role":"assistant","tool_calls":[` + mustJSON(call1) + `,` + mustJSON(call1) + `]}]}`, "same id"},
		{"an unknown field in a message", contract.SubjectAppend, `{"session_id":"h","messages":[{"role":"tool","tool_call_id":"c1","content":"ok","colour":"red"}]}`, `"colour"`},
		{"an upload with content", contract.SubjectAppend, `{"session_id":"h","messages":[{"upload_id":"u1","content":"also this"}]}`, "upload_id"},
		{"a content part of no known type", contract.SubjectAppend, `{"session_id":"h","messages":[{"role":"tool","tool_call_id":"c1","content":[{"type":"video","url":"x"}]}]}`, `"video"`},
		{"an image that is not base64", contract.SubjectAppend, `{"session_id":"h","messages":[{"role":"tool","tool_call_id":"c1","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%%%not base64"}}]}]}`, "base64"},
		{"a key given twice", contract.SubjectAppend, `{"session_id":"other","session_id":"h","messages":[{"role":"tool","tool_call_id":"c1","content":"ok"}]}`, "session_id"},
		{"a role of the wrong type", contract.SubjectAppend, `{"session_id":"h","messages":[{"role":5,"content":"ok"}]}`, "role"},
		{"a 10,000-character id", contract.SubjectAppend, `{"session_id":"h","messages":[{"id":"` + long + `","role":"tool","tool_call_id":"c1","content":"ok"}]}`, "id"},
		{"a 10,000-character session id", contract.SubjectContext, `{"session_id":"` + long + `"}`, "session_id"},
		{"a cache used an hour from now", contract.SubjectCompact, `{"session_id":"h","request_id":"r1","cache":{"last_request_time":"` + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + `","ttl_seconds":300}}`, "last_request_time"},
	} {
		m, err := nc.Request(tc.subject, []byte(tc.body), 30*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		code := m.Header.Get("Nats-Service-Error-Code")
		var eb map[string]any
		_ = json.Unmarshal(m.Data, &eb)
		text, _ := eb["error"].(string)
		if text == "" {
			text = m.Header.Get("Nats-Service-Error")
		}
		if code != "400" || !strings.Contains(text, tc.want) {
			t.Errorf("%s: answered %s %q, want 400 naming %s", tc.name, code, truncated(text), tc.want)
		}
		if strings.Contains(text, "Go struct") || strings.Contains(text, "session.") || len(text) > 1000 {
			t.Errorf("%s: the error names Go types or echoes the input: %q", tc.name, truncated(text))
		}
	}
	var h struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if code := call(t, nc, contract.SubjectHistory, map[string]any{"session_id": "h"}, &h); code != "" || len(h.Messages) != 2 {
		t.Fatalf("the session after the refused inputs: %s, %d messages, want the 2 created", code, len(h.Messages))
	}
	if code := call(t, nc, contract.SubjectHistory, map[string]any{"session_id": "h2"}, nil); code != "404" {
		t.Fatalf("a refused create stored session h2: %s", code)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func truncated(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
