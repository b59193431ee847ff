package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/gateway"
	"github.com/compactor/compactor/internal/natstest"
)

// TestAgentPastItsWindow drives an agent of each API, streamed and not,
// through a task four times its window: every call the upstream gets fits
// the window, its tool calls and results stay paired, the agent finishes,
// and the session holds what the agent sent, each message once.
func TestAgentPastItsWindow(t *testing.T) {
	const window, steps = 6000, 24
	for _, api := range []string{"chat", "responses", "messages"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", api, stream), func(t *testing.T) {
				s := start(t, window, window, readFiles(steps))
				a := newAgent(t, api, s.url, "You are a careful assistant that reads files.", "Read the files f1.txt to f24.txt and report.")
				a.stream = stream
				sid := fmt.Sprintf("gw-test-%s-%v-%s", api, stream, nonce())
				a.header.Set(gateway.HeaderSession, sid)
				turns := 0
				for ; turns < 3*steps; turns++ {
					status, called := a.turn()
					if status != 200 {
						t.Fatalf("turn %d: status %d", turns, status)
					}
					if !called {
						break
					}
				}
				if a.calls != steps {
					t.Fatalf("the agent ran %d tools in %d turns, want %d", a.calls, turns, steps)
				}
				compacted := 0
				for i, c := range s.up.Calls() {
					if c.Tokens > window {
						t.Errorf("call %d: %d tokens over the window %d", i, c.Tokens, window)
					}
					if err := paired(api, c.Body); err != nil {
						t.Errorf("call %d: %v", i, err)
					}
					if strings.Contains(string(c.Body), "Summary of messages") {
						compacted++
					}
				}
				if compacted == 0 {
					t.Fatal("no call went upstream compacted")
				}
				if r := s.up.Refusals(); len(r) > 0 {
					t.Fatalf("the upstream refused %d calls: %s", len(r), r[0])
				}
				checkStored(t, s.c, sid, a)
			})
		}
	}
}

// checkStored compares the session with the agent's list: the same tool
// results, in order, each once, and the task first. (A call's messages
// are appended while it goes upstream: the last call's may still be on
// their way when the agent has its answer.)
func checkStored(t *testing.T, c *client.Client, sid string, a *agent) {
	t.Helper()
	var h client.History
	natstest.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		var err error
		if h, err = c.History(t.Context(), sid); err != nil {
			return err
		}
		results := 0
		for _, m := range h.Messages {
			if m.Role == client.Tool {
				results++
			}
		}
		if results < a.calls {
			return fmt.Errorf("the session holds %d tool results, the agent sent %d", results, a.calls)
		}
		return nil
	})
	var ids []string
	var outputs int
	for i, m := range h.Messages {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
		if m.Role == client.Tool {
			ids = append(ids, m.ToolCallID)
			if m.Content.Text != bigOutput(len(ids)) {
				t.Fatalf("tool result %d stored as %q", len(ids), m.Content.Text)
			}
			outputs++
		}
	}
	if outputs != a.calls {
		t.Fatalf("the session holds %d tool results, the agent sent %d", outputs, a.calls)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("tool result %s stored twice", id)
		}
		seen[id] = true
	}
	if first := h.Messages[0]; first.Role != client.User || !strings.Contains(first.Content.Text, "Read the files") {
		t.Fatalf("the first message stored is %s %q", first.Role, first.Content.Text)
	}
	if len(h.Compactions) == 0 {
		t.Fatal("no compaction committed")
	}
}

// paired checks that every tool call of a body has its result right after
// it and every result its call before it, in the API's own shapes.
func paired(api string, body []byte) error {
	var req struct {
		Messages []struct {
			Role      string          `json:"role"`
			Content   json.RawMessage `json:"content"`
			ToolCalls []struct {
				ID string `json:"id"`
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
		Input []struct {
			Type   string `json:"type"`
			CallID string `json:"call_id"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return err
	}
	open := map[string]bool{}
	switch api {
	case "chat":
		for i, m := range req.Messages {
			if m.Role == "tool" {
				if !open[m.ToolCallID] {
					return fmt.Errorf("message %d answers %s, which no call before it made", i, m.ToolCallID)
				}
				delete(open, m.ToolCallID)
				continue
			}
			if len(open) > 0 {
				return fmt.Errorf("message %d comes before the results of %v", i, open)
			}
			for _, c := range m.ToolCalls {
				open[c.ID] = true
			}
		}
	case "responses":
		for i, it := range req.Input {
			switch it.Type {
			case "function_call":
				open[it.CallID] = true
			case "function_call_output":
				if !open[it.CallID] {
					return fmt.Errorf("item %d answers %s, which no call before it made", i, it.CallID)
				}
				delete(open, it.CallID)
			}
		}
	default:
		for i, m := range req.Messages {
			var blocks []struct {
				Type      string `json:"type"`
				ID        string `json:"id"`
				ToolUseID string `json:"tool_use_id"`
			}
			_ = json.Unmarshal(m.Content, &blocks)
			results := map[string]bool{}
			for _, b := range blocks {
				if b.Type == "tool_result" {
					results[b.ToolUseID] = true
					if !open[b.ToolUseID] {
						return fmt.Errorf("message %d answers %s, which the message before it did not call", i, b.ToolUseID)
					}
				}
			}
			for id := range open {
				if !results[id] {
					return fmt.Errorf("message %d does not answer %s", i, id)
				}
			}
			open = map[string]bool{}
			for _, b := range blocks {
				if b.Type == "tool_use" {
					open[b.ID] = true
				}
			}
		}
	}
	if len(open) > 0 && api != "messages" {
		return fmt.Errorf("calls %v have no result", slices.Collect(func(yield func(string) bool) {
			for id := range open {
				if !yield(id) {
					return
				}
			}
		}))
	}
	return nil
}

// post sends a body to the gateway and returns the answer's status, body
// and the session the gateway named.
func post(t *testing.T, url string, h http.Header, body []byte) (int, []byte, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header.Get(gateway.HeaderSession)
}
