package pipeline

import "github.com/compactor/compactor/internal/session"

// SelectInput is what the select stage needs. Candidates are the messages
// that may be summarised: not pinned, not summarised yet, in seq order, with
// Tokens counted.
type SelectInput struct {
	Candidates      []session.Message
	KeepRecentTurns int
	// TailBudget is the most tokens the raw tail may hold; MaxTailMessages
	// the most messages (zero: no bound).
	TailBudget      int
	MaxTailMessages int
	// MinSummarised is the fewest tokens the summarised messages must hold
	// for a summary to replace them with fewer: a cut already moved past
	// the keep-recent-turns point (by the tail's budget or its message
	// bound) that summarises less moves on to the first legal point that
	// summarises enough, when there is one (a count-triggered cut of two
	// short messages could only be replaced by a longer summary).
	MinSummarised int
}

// Selection is the select stage's answer: Candidates[:Cut] are summarised,
// Candidates[Cut:] stay raw.
type Selection struct {
	Cut        int
	TailTokens int
	// Moved is set when the cut moved past the keep-recent-turns point so
	// that the tail fits its budget.
	Moved bool
}

// SafeCuts reports, for every index i of msgs, whether cutting before msgs[i]
// is legal: msgs[i] is a user or assistant message, and no tool call made
// before i has its result at or after i. A call whose result never comes
// does not block a cut (there is nothing to separate it from).
func SafeCuts(msgs []session.Message) []bool {
	n := len(msgs)
	// A result pairs with the latest call of its id before it: real
	// transcripts reuse call ids, and a later reuse must not tie the first
	// call to the last result.
	delta := make([]int, n+1) // blocked[i] > 0: some (call, result] covers i
	latest := make(map[string]int, 8)
	for i := range msgs {
		for _, tc := range msgs[i].ToolCalls {
			latest[tc.ID] = i
		}
		if msgs[i].Role == session.RoleTool && msgs[i].ToolCallID != "" {
			if j, ok := latest[msgs[i].ToolCallID]; ok && j < i {
				delta[j+1]++
				delta[i+1]--
			}
		}
	}
	safe := make([]bool, n)
	open := 0
	for i := range msgs {
		open += delta[i]
		role := msgs[i].Role
		safe[i] = open == 0 && (role == session.RoleUser || role == session.RoleAssistant)
	}
	return safe
}

// ToolCall identifies one tool call: the message that made it and its id
// (ids alone are not unique: real transcripts reuse them).
type ToolCall struct {
	MessageID string
	CallID    string
}

// ToolPairs pairs every tool result in msgs with the latest call of its id
// before it, the rule SafeCuts cuts by. It returns each paired result's
// call (by result message id) and how many results each call has.
func ToolPairs(msgs []session.Message) (callOf map[string]ToolCall, results map[ToolCall]int) {
	callOf, results = map[string]ToolCall{}, map[ToolCall]int{}
	latest := map[string]string{}
	for i := range msgs {
		for _, tc := range msgs[i].ToolCalls {
			latest[tc.ID] = msgs[i].ID
		}
		if msgs[i].Role == session.RoleTool {
			if m, ok := latest[msgs[i].ToolCallID]; ok {
				c := ToolCall{MessageID: m, CallID: msgs[i].ToolCallID}
				callOf[msgs[i].ID] = c
				results[c]++
			}
		}
	}
	return callOf, results
}

// Select decides where the raw tail starts. It keeps the last
// KeepRecentTurns turns raw; when that tail is over its budget (tokens or
// messages), the cut moves forward to the first legal point from which the
// tail fits, or, when none does, to the last legal point (everything is
// summarised and the tail is empty, or holds only a call still waiting for
// its result). It never cuts between a tool call and its result, nor after
// a call whose result has not come yet. Select is pure and runs in linear
// time.
func Select(in SelectInput) Selection {
	sel := selectCut(in)
	if sel.Cut == 0 || !sel.Moved || in.MinSummarised <= 0 {
		return sel // (the last turns kept raw stay raw)
	}
	msgs := in.Candidates
	summarised := 0
	for i := range msgs[:sel.Cut] {
		summarised += msgs[i].Tokens
	}
	if summarised >= in.MinSummarised {
		return sel
	}
	safe, end := SafeCuts(msgs), Pending(msgs)
	moved := 0
	for i := sel.Cut; i < min(end, len(msgs)); i++ {
		moved += msgs[i].Tokens
		if cut := i + 1; summarised+moved >= in.MinSummarised && (cut == len(msgs) || safe[cut]) {
			return Selection{Cut: cut, TailTokens: sel.TailTokens - moved, Moved: true}
		}
	}
	return sel
}

// selectCut is Select's cut before MinSummarised moves it.
func selectCut(in SelectInput) Selection {
	msgs := in.Candidates
	n := len(msgs)
	if n == 0 {
		return Selection{}
	}
	safe := SafeCuts(msgs)
	end := Pending(msgs)
	legal := func(i int) bool { return i <= end && (i == n || safe[i]) }
	suffix := make([]int, n+1) // suffix[i] = tokens of msgs[i:]
	for i := n - 1; i >= 0; i-- {
		suffix[i] = suffix[i+1] + msgs[i].Tokens
	}
	fits := func(i int) bool {
		return suffix[i] <= in.TailBudget && (in.MaxTailMessages <= 0 || n-i <= in.MaxTailMessages)
	}
	// The deepest cut: after the last message, or before a call still
	// waiting for its result.
	last := 0
	for i := end; i > 0; i-- {
		if legal(i) {
			last = i
			break
		}
	}

	// The keep-recent-turns point: the K-th user message from the end.
	turnCut := 0
	if k := in.KeepRecentTurns; k > 0 {
		seen := 0
		for i := n - 1; i >= 0; i-- {
			if msgs[i].Role == session.RoleUser {
				seen++
				if seen == k {
					turnCut = i
					break
				}
			}
		}
	} else {
		turnCut = n // keep no turn: the last legal point
	}
	// Make it legal: the latest legal point at or before it (keeping more
	// raw), else the earliest after it.
	cut := -1
	for i := min(turnCut, end, n-1); i >= 0; i-- {
		if legal(i) {
			cut = i
			break
		}
	}
	if cut < 0 {
		for i := turnCut; i < end; i++ {
			if legal(i) {
				cut = i
				break
			}
		}
	}
	if cut < 0 { // no legal cut inside: keep all, or summarise what may be
		if fits(0) || last == 0 {
			return Selection{TailTokens: suffix[0]}
		}
		return Selection{Cut: last, TailTokens: suffix[last], Moved: true}
	}
	if fits(cut) {
		return Selection{Cut: cut, TailTokens: suffix[cut]}
	}
	for i := cut + 1; i <= last; i++ {
		if legal(i) && fits(i) {
			return Selection{Cut: i, TailTokens: suffix[i], Moved: true}
		}
	}
	// No raw tail fits (the last turn alone is too big, e.g. one huge tool
	// result): summarise everything that may be. Cutting after the last
	// message is legal, since every call before it is answered before it
	// or never, unless a call there still waits for its result.
	return Selection{Cut: last, TailTokens: suffix[last], Moved: true}
}

// Pending is the index of the message holding a tool call still waiting
// for its result (the session's last assistant message, followed only by
// results, not all of them come), len(msgs) when there is none. No cut
// may fall after it: its result, appended later, would be kept without
// its call.
func Pending(msgs []session.Message) int {
	n := len(msgs)
	i := n - 1
	answered := map[string]bool{}
	for ; i >= 0 && msgs[i].Role == session.RoleTool; i-- {
		answered[msgs[i].ToolCallID] = true
	}
	if i < 0 || msgs[i].Role != session.RoleAssistant {
		return n
	}
	for _, tc := range msgs[i].ToolCalls {
		if !answered[tc.ID] {
			return i
		}
	}
	return n
}
