package standin

import (
	"encoding/json"
	"time"
)

// response is a Responses API response object.
func (a *answer) response(status string, output []any) map[string]any {
	var usage any
	if status == "completed" {
		usage = map[string]any{"input_tokens": a.in, "output_tokens": a.out, "total_tokens": a.in + a.out,
			"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	}
	return map[string]any{"id": a.rid, "object": "response", "created_at": time.Now().Unix(), "status": status,
		"model": a.call.Model, "output": output, "usage": usage, "error": nil, "incomplete_details": nil,
		"instructions": nil, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{}, "text": map[string]any{"format": map[string]any{"type": "text"}},
		"temperature": 1.0, "top_p": 1.0, "metadata": map[string]any{}, "store": false, "truncation": "disabled"}
}

func messageItem(id, text, status string) map[string]any {
	content := []any{}
	if status == "completed" {
		content = []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}}
	}
	return map[string]any{"type": "message", "id": id, "status": status, "role": "assistant", "content": content}
}

func callItem(id string, c call, args, status string) map[string]any {
	return map[string]any{"type": "function_call", "id": id, "call_id": c.id, "name": c.name, "arguments": args, "status": status}
}

// responseOutput is the reply's output items (msgID: the message's id).
func (a *answer) responseOutput(calls []call, msgID string) []any {
	var out []any
	if a.reply.Text != "" || len(calls) == 0 {
		if msgID == "" {
			msgID = newID("msg_")
		}
		out = append(out, messageItem(msgID, a.reply.Text, "completed"))
	}
	for _, c := range calls {
		out = append(out, callItem("fc_"+c.id, c, c.args, "completed"))
	}
	return out
}

func (a *answer) streamResponses() {
	s := a.sse()
	ev := func(name string, v map[string]any) {
		v["type"], v["sequence_number"] = name, s.seq
		s.event(name, v)
	}
	ev("response.created", map[string]any{"response": a.response("in_progress", []any{})})
	ev("response.in_progress", map[string]any{"response": a.response("in_progress", []any{})})
	idx := 0
	calls := a.calls()
	msgID := newID("msg_")
	if a.reply.Text != "" || len(calls) == 0 {
		ev("response.output_item.added", map[string]any{"output_index": idx, "item": messageItem(msgID, "", "in_progress")})
		part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}
		ev("response.content_part.added", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "part": part})
		for _, p := range pieces(a.reply.Text) {
			ev("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "delta": p, "logprobs": []any{}})
		}
		ev("response.output_text.done", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "text": a.reply.Text, "logprobs": []any{}})
		done := map[string]any{"type": "output_text", "text": a.reply.Text, "annotations": []any{}, "logprobs": []any{}}
		ev("response.content_part.done", map[string]any{"item_id": msgID, "output_index": idx, "content_index": 0, "part": done})
		ev("response.output_item.done", map[string]any{"output_index": idx, "item": messageItem(msgID, a.reply.Text, "completed")})
		idx++
	}
	for _, c := range calls {
		id := "fc_" + c.id
		ev("response.output_item.added", map[string]any{"output_index": idx, "item": callItem(id, c, "", "in_progress")})
		for _, p := range pieces(c.args) {
			ev("response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": p})
		}
		ev("response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": idx, "arguments": c.args})
		ev("response.output_item.done", map[string]any{"output_index": idx, "item": callItem(id, c, c.args, "completed")})
		idx++
	}
	ev("response.completed", map[string]any{"response": a.response("completed", a.responseOutput(calls, msgID))})
}

// message is a Messages API message.
func (a *answer) message(content []any, stop any, out int) map[string]any {
	return map[string]any{"id": a.mid, "type": "message", "role": "assistant", "model": a.call.Model, "content": content,
		"stop_reason": stop, "stop_sequence": nil,
		"usage": map[string]any{"input_tokens": a.in, "output_tokens": out, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
			"service_tier": "standard"}}
}

func (a *answer) stopReason() string {
	if len(a.reply.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func (a *answer) messageContent(calls []call) []any {
	var out []any
	if a.reply.Text != "" || len(calls) == 0 {
		out = append(out, map[string]any{"type": "text", "text": a.reply.Text})
	}
	for _, c := range calls {
		out = append(out, map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": json.RawMessage(c.args)})
	}
	return out
}

func (a *answer) streamMessages() {
	s := a.sse()
	ev := func(name string, v map[string]any) {
		v["type"] = name
		s.event(name, v)
	}
	ev("message_start", map[string]any{"message": a.message([]any{}, nil, 1)})
	idx := 0
	calls := a.calls()
	if a.reply.Text != "" || len(calls) == 0 {
		ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "text", "text": ""}})
		for _, p := range pieces(a.reply.Text) {
			ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "text_delta", "text": p}})
		}
		ev("content_block_stop", map[string]any{"index": idx})
		idx++
	}
	for _, c := range calls {
		ev("content_block_start", map[string]any{"index": idx, "content_block": map[string]any{"type": "tool_use", "id": c.id, "name": c.name, "input": map[string]any{}}})
		for _, p := range pieces(c.args) {
			ev("content_block_delta", map[string]any{"index": idx, "delta": map[string]any{"type": "input_json_delta", "partial_json": p}})
		}
		ev("content_block_stop", map[string]any{"index": idx})
		idx++
	}
	ev("message_delta", map[string]any{"delta": map[string]any{"stop_reason": a.stopReason(), "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": a.out}})
	ev("message_stop", map[string]any{})
}
