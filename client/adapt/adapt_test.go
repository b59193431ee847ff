package adapt_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/client/adapt"
)

const pixel = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

// aContext is a context as the service answers it: the system prompt, the
// summary, then a turn with an image, two tool calls and their results,
// and the stored fields a provider must not get.
func aContext() []client.Message {
	summary := client.Text("sum", client.User, "Summary of the conversation so far: the user booked flight HAT001.")
	summary.IsCompaction, summary.Seq, summary.Tokens = true, 41, 30
	summary.Compaction = &client.Compaction{SummaryText: "the user booked flight HAT001", ToSeq: 40}
	user := client.Message{ID: "u1", Seq: 42, Role: client.User, Tokens: 900, Content: client.Content{Text: "Is this my seat?", Parts: []json.RawMessage{
		client.TextPart("Is this my seat?"), client.ImagePart(pixel, "low"), client.ImagePart("https://example.com/seatmap.png", ""),
	}}}
	call := client.Message{ID: "a1", Seq: 43, Role: client.Assistant, Content: client.Content{Text: "Let me check."}, ToolCalls: []client.ToolCall{
		{ID: "call_1", Type: "function", Function: client.FunctionCall{Name: "get_seat", Arguments: `{"flight":"HAT001"}`}},
		{ID: "call_2", Type: "function", Function: client.FunctionCall{Name: "get_map", Arguments: `{"plane":"A320"}`}},
	}}
	return []client.Message{
		client.Text("sys", client.System, "You are an airline's assistant."),
		summary,
		user,
		call,
		adapt.ToolResult("t1", "call_1", "get_seat", `{"seat":"12A"}`),
		adapt.ToolResult("t2", "call_2", "get_map", "window seats: A and F"),
		client.Text("a2", client.Assistant, "Yes: 12A, a window seat."),
	}
}

func jsonOf(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The OpenAI SDK's own parameter types take the context, and write back
// what they took, field for field.
func TestOpenAISDKTakesTheContext(t *testing.T) {
	msgs := adapt.ToOpenAI(aContext())
	var params []openai.ChatCompletionMessageParamUnion
	if err := adapt.Into(&params, msgs); err != nil {
		t.Fatal(err)
	}
	if len(params) != 7 || params[0].OfSystem == nil || params[1].OfUser == nil || params[3].OfAssistant == nil || params[4].OfTool == nil {
		t.Fatalf("the SDK read %d messages: %+v", len(params), params)
	}
	parts := params[2].OfUser.Content.OfArrayOfContentParts
	if len(parts) != 3 || parts[1].OfImageURL == nil || parts[1].OfImageURL.ImageURL.URL != pixel || parts[2].OfImageURL.ImageURL.URL != "https://example.com/seatmap.png" {
		t.Fatalf("the user's parts: %+v", parts)
	}
	calls := params[3].OfAssistant.ToolCalls
	if len(calls) != 2 || calls[1].OfFunction == nil || calls[1].OfFunction.ID != "call_2" || calls[1].OfFunction.Function.Name != "get_map" || calls[1].OfFunction.Function.Arguments != `{"plane":"A320"}` {
		t.Fatalf("the tool calls: %+v", calls)
	}
	if params[5].OfTool.ToolCallID != "call_2" || params[5].OfTool.Content.OfString.Value != "window seats: A and F" {
		t.Fatalf("a tool result: %+v", params[5].OfTool)
	}
	// What the SDK sends is what the adapter wrote: nothing lost, and none
	// of the service's own fields (id, seq, tokens, compaction).
	body := openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: params}
	sent := jsonOf(t, body).(map[string]any)["messages"]
	if want := jsonOf(t, msgs); !reflect.DeepEqual(sent, want) {
		t.Fatalf("the SDK sends\n%v\nthe adapter wrote\n%v", sent, want)
	}
	for _, m := range sent.([]any) {
		for _, k := range []string{"id", "seq", "tokens", "is_compaction", "compaction"} {
			if _, ok := m.(map[string]any)[k]; ok {
				t.Errorf("a message sent to OpenAI has the service's field %q", k)
			}
		}
	}
}

// An OpenAI reply, as the SDK decodes the API's response, reads back as a
// message to append, its tool calls intact.
func TestOpenAIReplyBack(t *testing.T) {
	const response = `{"id":"chatcmpl-1","object":"chat.completion","created":1741569952,"model":"gpt-4o-2024-08-06",
	 "choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":null,"annotations":[],
	   "tool_calls":[{"id":"call_9","type":"function","function":{"name":"change_seat","arguments":"{\"seat\":\"14F\"}"}}]},
	   "logprobs":null,"finish_reason":"tool_calls"}],
	 "usage":{"prompt_tokens":82,"completion_tokens":17,"total_tokens":99}}`
	var cc openai.ChatCompletion
	if err := json.Unmarshal([]byte(response), &cc); err != nil {
		t.Fatal(err)
	}
	m, err := adapt.FromOpenAI("a3", cc.Choices[0].Message)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "a3" || m.Role != client.Assistant || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "call_9" ||
		m.ToolCalls[0].Function.Name != "change_seat" || m.ToolCalls[0].Function.Arguments != `{"seat":"14F"}` || m.Content.Text != "" {
		t.Fatalf("the reply read back: %+v", m)
	}
	if _, err := adapt.FromOpenAI("x", map[string]any{"role": "assistant"}); err == nil {
		t.Error("an empty reply was read")
	}
	if _, err := adapt.FromOpenAI("x", map[string]any{"role": "user", "content": "hi"}); err == nil || !strings.Contains(err.Error(), `role "user"`) {
		t.Errorf("a user message read as a reply: %v", err)
	}
	if _, err := adapt.FromOpenAI("x", []int{1}); err == nil {
		t.Error("a list read as a reply")
	}
}

// The Anthropic SDK's own parameter types take the context: the system
// prompt apart, tool calls as tool_use, results as tool_result blocks of
// a user message, images as image blocks, user and assistant in turn.
func TestAnthropicSDKTakesTheContext(t *testing.T) {
	system, msgs := adapt.ToAnthropic(aContext())
	if system != "You are an airline's assistant." {
		t.Fatalf("system %q", system)
	}
	var params []anthropic.MessageParam
	if err := adapt.Into(&params, msgs); err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, p := range params {
		switch {
		case p.OfUser != nil:
			roles = append(roles, "user")
		case p.OfAssistant != nil:
			roles = append(roles, "assistant")
		default:
			roles = append(roles, "?")
		}
	}
	if !reflect.DeepEqual(roles, []string{"user", "assistant", "user", "assistant"}) {
		t.Fatalf("roles %v: the summary and the user's turn merge, the results go in one user message", roles)
	}
	first := params[0].OfUser.Content
	if len(first) != 4 || first[0].OfText == nil || first[2].OfImage == nil || first[2].OfImage.Source.OfBase64 == nil ||
		first[2].OfImage.Source.OfBase64.MediaType != "image/png" || first[3].OfImage.Source.OfURL == nil || first[3].OfImage.Source.OfURL.URL != "https://example.com/seatmap.png" {
		t.Fatalf("the first user message: %+v", first)
	}
	uses := params[1].OfAssistant.Content
	if len(uses) != 3 || uses[0].OfText == nil || uses[2].OfToolUse == nil || uses[2].OfToolUse.ID != "call_2" || uses[2].OfToolUse.Name != "get_map" {
		t.Fatalf("the assistant's blocks: %+v", uses)
	}
	results := params[2].OfUser.Content
	if len(results) != 2 || results[0].OfToolResult == nil || results[0].OfToolResult.ToolUseID != "call_1" ||
		results[0].OfToolResult.Content[0].OfText.Text != `{"seat":"12A"}` {
		t.Fatalf("the tool results: %+v", results)
	}
	// The request the SDK sends holds it all.
	body := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 1024, System: []anthropic.TextBlockParam{{Text: system}}, Messages: params}
	sent := jsonOf(t, body).(map[string]any)["messages"].([]any)
	use := sent[1].(map[string]any)["content"].([]any)[1].(map[string]any)
	if use["type"] != "tool_use" || !reflect.DeepEqual(use["input"], map[string]any{"flight": "HAT001"}) {
		t.Fatalf("the SDK sends the tool use as %v", use)
	}
}

// An Anthropic reply, as the SDK decodes the API's response, reads back as
// a message to append: its text, its tool_use blocks as tool calls.
func TestAnthropicReplyBack(t *testing.T) {
	const response = `{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5",
	 "content":[{"type":"text","text":"I'll move you."},{"type":"tool_use","id":"toolu_01","name":"change_seat","input":{"seat":"14F"}}],
	 "stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":120,"output_tokens":40}}`
	var msg anthropic.Message
	if err := json.Unmarshal([]byte(response), &msg); err != nil {
		t.Fatal(err)
	}
	m, err := adapt.FromAnthropic("a3", msg)
	if err != nil {
		t.Fatal(err)
	}
	if m.Content.Text != "I'll move you." || len(m.ToolCalls) != 1 || m.ToolCalls[0].ID != "toolu_01" || m.ToolCalls[0].Function.Name != "change_seat" ||
		m.ToolCalls[0].Function.Arguments != `{"seat":"14F"}` {
		t.Fatalf("the reply read back: %+v", m)
	}
	if _, err := adapt.FromAnthropic("x", map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "hi"}}}); err == nil ||
		!strings.Contains(err.Error(), `role "user"`) {
		t.Errorf("a user message read as a reply: %v", err)
	}
	// And it goes back out as the same tool_use, its result after it.
	_, msgs := adapt.ToAnthropic([]client.Message{client.Text("u", client.User, "Move me"), m, adapt.ToolResult("t", "toolu_01", "change_seat", "done")})
	var params []anthropic.MessageParam
	if err := adapt.Into(&params, msgs); err != nil {
		t.Fatal(err)
	}
	if len(params) != 3 || params[1].OfAssistant.Content[1].OfToolUse.ID != "toolu_01" || params[2].OfUser.Content[0].OfToolResult.ToolUseID != "toolu_01" {
		t.Fatalf("round trip: %+v", params)
	}
}
