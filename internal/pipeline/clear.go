package pipeline

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/compactor/compactor/internal/session"
)

// ClearInput is what the clearing step needs.
type ClearInput struct {
	// Messages are the raw messages after the summary (the pinned ones
	// excluded), as the context shows them, with Tokens counted.
	Messages []session.Message
	// Tail is the index in Messages where the raw tail starts: messages
	// from there on are never cleared.
	Tail int
	// Already holds the seqs cleared before (they stay cleared).
	Already map[int64]bool
	// KeepToolResults, MinTokens, ExcludeTools and Inputs are the
	// configuration's keep_tool_results, clear_min_tokens, exclude_tools
	// and clear_tool_inputs.
	KeepToolResults int
	MinTokens       int
	ExcludeTools    []string
	Inputs          bool
	// Need is how many tokens clearing should remove to bring the context
	// to its target; AtLeast is the smallest batch worth clearing.
	Need, AtLeast int
	// Count counts a message as it would be rendered, in Encoding.
	Count    func(*session.Message) int
	Encoding string
}

// placeholderEstimate bounds a result placeholder's count, for choosing
// what to clear before counting only what is chosen (counting is the
// costly part).
const placeholderEstimate = 48

// ClearPlan is what the clearing step would clear: oldest first, and the
// tokens it saves.
type ClearPlan struct {
	Cleared []session.Cleared
	Saved   int
}

// PlanClear chooses the messages to clear: tool results (and, with Inputs,
// tool calls' large arguments) before the raw tail, except the last
// KeepToolResults results, results under MinTokens and those of excluded
// tools. It clears the oldest first, until it has saved max(Need,
// AtLeast); when all it may clear saves less than AtLeast, it clears
// nothing (a small batch would cost the provider's cached prefix for
// little). Oldest first also keeps the cache: each batch starts where the
// previous one ended, so the context before it stays as it was. A tool
// call and its result stay paired: only their content changes.
func PlanClear(in ClearInput) ClearPlan {
	names := toolNames(in.Messages)
	exclude := make(map[string]bool, len(in.ExcludeTools))
	for _, t := range in.ExcludeTools {
		exclude[t] = true
	}
	keep := map[int]bool{}
	for i, n := len(in.Messages)-1, 0; i >= 0 && n < in.KeepToolResults; i-- {
		if in.Messages[i].Role == session.RoleTool {
			keep[i] = true
			n++
		}
	}
	type option struct {
		c     session.Cleared
		saves int
	}
	var opts []option
	total := 0
	for i := 0; i < min(in.Tail, len(in.Messages)); i++ {
		m := &in.Messages[i]
		if in.Already[m.Seq] {
			continue
		}
		var c session.Cleared
		switch {
		case m.Role == session.RoleTool && !keep[i] && m.Tokens >= in.MinTokens:
			tool := names[m.ID]
			if tool == "" {
				tool = m.Name
			}
			if exclude[tool] {
				continue
			}
			c = session.Cleared{Seq: m.Seq, ID: m.ID, Kind: session.ClearedResult, Tool: tool, Tokens: m.Tokens}
		case in.Inputs && m.Role == session.RoleAssistant && hasLargeArguments(m):
			tool := m.ToolCalls[0].Function.Name
			if exclude[tool] {
				continue
			}
			c = session.Cleared{Seq: m.Seq, ID: m.ID, Kind: session.ClearedArguments, Tool: tool, Tokens: m.Tokens}
		default:
			continue
		}
		saves := m.Tokens - placeholderEstimate
		if c.Kind == session.ClearedArguments {
			r := RenderCleared(*m, c)
			c.Rendered = in.Count(&r)
			if saves = m.Tokens - c.Rendered; saves < in.MinTokens {
				continue
			}
		}
		if saves <= 0 {
			continue
		}
		opts = append(opts, option{c, saves})
		total += saves
	}
	if total == 0 || total < in.AtLeast {
		return ClearPlan{}
	}
	want := max(in.Need, in.AtLeast)
	var plan ClearPlan
	estimated := 0
	for _, o := range opts {
		if estimated >= want {
			break
		}
		c := o.c
		if c.Rendered == 0 {
			c.Rendered = placeholderTokens(in, c)
		}
		c.Encoding = in.Encoding
		plan.Cleared = append(plan.Cleared, c)
		plan.Saved += c.Tokens - c.Rendered
		estimated += o.saves
	}
	return plan
}

// hasLargeArguments reports whether a tool call of m has arguments that
// RenderCleared would replace.
func hasLargeArguments(m *session.Message) bool {
	for _, tc := range m.ToolCalls {
		if len(tc.Function.Arguments) > argsPlaceholderMin {
			return true
		}
	}
	return false
}

// indexOfSeq finds the message of seq in msgs (in seq order).
func indexOfSeq(msgs []session.Message, seq int64) int {
	i, _ := slices.BinarySearchFunc(msgs, seq, func(m session.Message, s int64) int { return cmp.Compare(m.Seq, s) })
	return i
}

// toolNames maps each tool result's message id to the name of the
// function whose call it answers (paired as SafeCuts pairs them).
func toolNames(msgs []session.Message) map[string]string {
	callOf, _ := ToolPairs(msgs)
	fn := map[ToolCall]string{}
	for i := range msgs {
		for _, tc := range msgs[i].ToolCalls {
			fn[ToolCall{MessageID: msgs[i].ID, CallID: tc.ID}] = tc.Function.Name
		}
	}
	out := make(map[string]string, len(callOf))
	for id, c := range callOf {
		out[id] = fn[c]
	}
	return out
}

// ClearedPrefix opens the placeholder of a cleared tool result.
const ClearedPrefix = "[tool result cleared:"

// argsPlaceholderMin is the size in bytes over which a cleared tool call's
// arguments are replaced (smaller ones stay: they say what was done).
const argsPlaceholderMin = 200

// RenderCleared returns m as the context shows it cleared by c: a tool
// result's content, or its large tool-call arguments, replaced by a
// placeholder naming the tool, the original size, and the tool call and
// stored message (its seq) that expand_history reads it back from; the text depends on nothing random, so a
// replica or a retry renders the same context. The call and its result keep their ids, so they stay
// paired. The count is left for the caller (Tokens is zero).
func RenderCleared(m session.Message, c session.Cleared) session.Message {
	tool := c.Tool
	if tool == "" {
		tool = "a tool"
	}
	switch c.Kind {
	case session.ClearedArguments:
		calls := slices.Clone(m.ToolCalls)
		for i := range calls {
			if len(calls[i].Function.Arguments) > argsPlaceholderMin {
				note := fmt.Sprintf("arguments cleared (%d bytes); expand_history tool_call_id=%s (message %d) reads them back", len(calls[i].Function.Arguments), calls[i].ID, c.Seq)
				b, _ := json.Marshal(map[string]string{"cleared": note})
				calls[i].Function.Arguments = string(b)
			}
		}
		m.ToolCalls = calls
	default:
		m.Content = session.TextContent(fmt.Sprintf(ClearedPrefix+" %s, %d tokens; expand_history tool_call_id=%s (message %d) reads it back]", tool, c.Tokens, m.ToolCallID, c.Seq))
	}
	m.Tokens = 0
	return m
}

// applyCleared returns msgs with each message cleared renders as cleared
// (copied; the others shared), counted when the count stored with it is in
// encoding ("": any).
func applyCleared(msgs []session.Message, cleared []session.Cleared, encoding string) []session.Message {
	if len(cleared) == 0 {
		return msgs
	}
	bySeq := make(map[int64]session.Cleared, len(cleared))
	for _, c := range cleared {
		bySeq[c.Seq] = c
	}
	out := slices.Clone(msgs)
	for i := range out {
		if c, ok := bySeq[out[i].Seq]; ok && c.ID == out[i].ID {
			out[i] = RenderCleared(out[i], c)
			if encoding == "" || c.Encoding == encoding {
				out[i].Tokens = c.Rendered
			}
		}
	}
	return out
}

// PrefixKept is how many leading tokens of after are identical to before:
// the messages, from the first, that a provider would see unchanged (role,
// name, content, tool calls and call id; not the ids the store keeps), so
// that its cached prefix stays valid up to there.
func PrefixKept(before, after []session.Message) int {
	n := 0
	for i := 0; i < len(before) && i < len(after); i++ {
		if !sameForModel(&before[i], &after[i]) {
			break
		}
		n += after[i].Tokens
	}
	return n
}

func sameForModel(a, b *session.Message) bool {
	return a.Role == b.Role && a.Name == b.Name && a.ToolCallID == b.ToolCallID && a.Content.Text == b.Content.Text &&
		reflect.DeepEqual(a.Content.Parts, b.Content.Parts) && reflect.DeepEqual(a.ToolCalls, b.ToolCalls)
}

// placeholderCounts caches the count of a result placeholder by what it
// depends on: in cl100k_base and o200k_base, numbers are split into groups
// of up to three digits, each one token, apart from the text around them,
// so the count depends on the tool and the numbers' lengths only
// (TestPlaceholderCounts checks it). Counting is what clearing spends its
// time on: a session with hundreds of tool results would count hundreds
// of placeholders.
var (
	placeholderCounts sync.Map // string -> int
	placeholderKeys   atomic.Int64
)

const maxPlaceholderKeys = 4096

func placeholderTokens(in ClearInput, c session.Cleared) int {
	m := in.Messages[indexOfSeq(in.Messages, c.Seq)]
	byShape := c.Kind == session.ClearedResult && (in.Encoding == "cl100k_base" || in.Encoding == "o200k_base")
	key := fmt.Sprintf("%s\x00%s\x00%s\x00%d\x00%d", in.Encoding, m.Role, c.Tool, len(strconv.Itoa(c.Tokens)), len(strconv.FormatInt(c.Seq, 10)))
	if n, ok := placeholderCounts.Load(key); ok && byShape {
		return n.(int)
	}
	r := RenderCleared(m, c)
	n := in.Count(&r)
	if !byShape {
		return n
	}
	if placeholderKeys.Load() < maxPlaceholderKeys {
		if _, loaded := placeholderCounts.LoadOrStore(key, n); !loaded {
			placeholderKeys.Add(1)
		}
	}
	return n
}
