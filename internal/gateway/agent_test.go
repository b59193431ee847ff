package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/standin"
)

// agent is a runtime written against one provider API in its plain JSON,
// as an SDK user's loop is: it keeps the whole list, resends it each turn,
// appends the reply and runs the tools it calls.
type agent struct {
	t      *testing.T
	api    string
	base   string
	header http.Header
	stream bool
	list   []json.RawMessage
	// system is the system prompt.
	system string
	// output is what a tool returns for call n.
	output func(n int) string
	calls  int
}

func newAgent(t *testing.T, api, base, system, task string) *agent {
	a := &agent{t: t, api: api, base: base, header: http.Header{}, system: system, output: bigOutput}
	switch api {
	case "chat":
		a.list = append(a.list, raw(map[string]any{"role": "system", "content": system}))
	case "responses":
		a.list = append(a.list, raw(map[string]any{"role": "developer", "content": system}))
	}
	a.user(task)
	return a
}

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (a *agent) user(text string) {
	switch a.api {
	case "messages":
		a.list = append(a.list, raw(map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": text}}}))
	default:
		a.list = append(a.list, raw(map[string]any{"role": "user", "content": text}))
	}
}

// body is the next call's body.
func (a *agent) body() []byte {
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "read_file", "description": "Read a file",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}}}}}
	switch a.api {
	case "chat":
		return raw(map[string]any{"model": "gpt-4o", "messages": a.list, "tools": []any{tool}, "stream": a.stream})
	case "responses":
		return raw(map[string]any{"model": "gpt-4o", "input": a.list, "store": false, "stream": a.stream,
			"tools": []any{map[string]any{"type": "function", "name": "read_file", "parameters": tool["function"].(map[string]any)["parameters"]}}})
	}
	return raw(map[string]any{"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": a.system, "messages": a.list, "stream": a.stream,
		"tools": []any{map[string]any{"name": "read_file", "input_schema": tool["function"].(map[string]any)["parameters"]}}})
}

// turn makes one call and takes its reply; it returns the HTTP status,
// and whether the model called a tool.
func (a *agent) turn() (int, bool) {
	a.t.Helper()
	path := map[string]string{"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}[a.api]
	req, err := http.NewRequest("POST", a.base+path, bytes.NewReader(a.body()))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header = a.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		a.t.Logf("status %d: %s", resp.StatusCode, b)
		return resp.StatusCode, false
	}
	if a.stream {
		b = a.assemble(b)
	}
	return 200, a.take(b)
}

// take appends a reply to the list and the tools' results; it reports
// whether a tool was called.
func (a *agent) take(b []byte) bool {
	var calls []struct{ id, name string }
	switch a.api {
	case "chat":
		var r struct {
			Choices []struct {
				Message json.RawMessage `json:"message"`
			} `json:"choices"`
		}
		must(a.t, json.Unmarshal(b, &r))
		var m struct {
			ToolCalls []struct {
				ID       string                `json:"id"`
				Function struct{ Name string } `json:"function"`
			} `json:"tool_calls"`
		}
		must(a.t, json.Unmarshal(r.Choices[0].Message, &m))
		a.list = append(a.list, r.Choices[0].Message)
		for _, tc := range m.ToolCalls {
			calls = append(calls, struct{ id, name string }{tc.ID, tc.Function.Name})
		}
		for _, c := range calls {
			a.calls++
			a.list = append(a.list, raw(map[string]any{"role": "tool", "tool_call_id": c.id, "content": a.output(a.calls)}))
		}
	case "responses":
		var r struct {
			Output []json.RawMessage `json:"output"`
		}
		must(a.t, json.Unmarshal(b, &r))
		for _, it := range r.Output {
			var item struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
			}
			must(a.t, json.Unmarshal(it, &item))
			a.list = append(a.list, it)
			if item.Type == "function_call" {
				calls = append(calls, struct{ id, name string }{item.CallID, ""})
			}
		}
		for _, c := range calls {
			a.calls++
			a.list = append(a.list, raw(map[string]any{"type": "function_call_output", "call_id": c.id, "output": a.output(a.calls)}))
		}
	default:
		var r struct {
			Content []json.RawMessage `json:"content"`
		}
		must(a.t, json.Unmarshal(b, &r))
		a.list = append(a.list, raw(map[string]any{"role": "assistant", "content": r.Content}))
		var results []any
		for _, blk := range r.Content {
			var tu struct{ Type, ID string }
			must(a.t, json.Unmarshal(blk, &tu))
			if tu.Type == "tool_use" {
				a.calls++
				calls = append(calls, struct{ id, name string }{tu.ID, ""})
				results = append(results, map[string]any{"type": "tool_result", "tool_use_id": tu.ID, "content": a.output(a.calls)})
			}
		}
		if len(results) > 0 {
			a.list = append(a.list, raw(map[string]any{"role": "user", "content": results}))
		}
	}
	return len(calls) > 0
}

// assemble reads a stream into the reply its API's whole body would be
// (the final event's object, or the deltas put together for chat).
func (a *agent) assemble(b []byte) []byte {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var text strings.Builder
	type tc struct{ ID, Name, Args string }
	var tcs []tc
	var msg map[string]any
	var content []any
	var blockArgs []string
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var ev map[string]any
		must(a.t, json.Unmarshal([]byte(data), &ev))
		switch a.api {
		case "chat":
			for _, ch := range ev["choices"].([]any) {
				d := ch.(map[string]any)["delta"].(map[string]any)
				if s, ok := d["content"].(string); ok {
					text.WriteString(s)
				}
				if calls, ok := d["tool_calls"].([]any); ok {
					for _, c := range calls {
						cm := c.(map[string]any)
						i := int(cm["index"].(float64))
						for len(tcs) <= i {
							tcs = append(tcs, tc{})
						}
						if id, ok := cm["id"].(string); ok {
							tcs[i].ID = id
						}
						f := cm["function"].(map[string]any)
						if n, ok := f["name"].(string); ok {
							tcs[i].Name = n
						}
						tcs[i].Args += f["arguments"].(string)
					}
				}
			}
		case "responses":
			if ev["type"] == "response.completed" {
				return raw(ev["response"])
			}
		default:
			switch ev["type"] {
			case "message_start":
				msg = ev["message"].(map[string]any)
			case "content_block_start":
				content = append(content, ev["content_block"])
				blockArgs = append(blockArgs, "")
			case "content_block_delta":
				i := int(ev["index"].(float64))
				d := ev["delta"].(map[string]any)
				if d["type"] == "text_delta" {
					blk := content[i].(map[string]any)
					blk["text"] = blk["text"].(string) + d["text"].(string)
				} else {
					blockArgs[i] += d["partial_json"].(string)
				}
			case "content_block_stop":
				i := int(ev["index"].(float64))
				if blk := content[i].(map[string]any); blk["type"] == "tool_use" {
					blk["input"] = json.RawMessage(blockArgs[i])
				}
			}
		}
	}
	if a.api == "chat" {
		m := map[string]any{"role": "assistant", "content": text.String()}
		if len(tcs) > 0 {
			var calls []any
			for _, c := range tcs {
				calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
			}
			m["tool_calls"] = calls
		}
		return raw(map[string]any{"choices": []any{map[string]any{"message": m}}})
	}
	if msg == nil {
		a.t.Fatalf("no message in the stream: %s", b)
	}
	msg["content"] = content
	return raw(msg)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// bigOutput is a tool's output of about 600 tokens, its own each call.
func bigOutput(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "file f%d.txt:\n", n)
	for i := range 60 {
		fmt.Fprintf(&b, "line %d of file %d: the value of setting_%d_%d is %d\n", i, n, n, i, n*i)
	}
	return b.String()
}

// readFiles calls read_file on one file after the other (the last
// message, a result, says which it read: what a compaction keeps raw),
// then answers.
func readFiles(steps int) standin.Script {
	return func(c standin.Call) standin.Reply {
		n := 0
		if m := lastFile.FindStringSubmatch(c.Last); m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		if n >= steps {
			return standin.Reply{Text: fmt.Sprintf("done after %d files", n)}
		}
		return standin.Reply{Text: "reading", ToolCalls: []standin.ToolCall{{Name: "read_file", Arguments: fmt.Sprintf(`{"path":"f%d.txt"}`, n+1)}}}
	}
}

var lastFile = regexp.MustCompile(`file f(\d+)\.txt:`)
