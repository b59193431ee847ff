package client

import (
	"context"
	"sort"

	"github.com/compactor/compactor/contract"
)

// Search finds a session's stored messages that match b's query,
// whatever compaction did with them (contract.SearchBody: the mode, the
// filters, the limit), best first, each with a snippet.
func (c *Client) Search(ctx context.Context, b contract.SearchBody) (contract.SearchAnswer, error) {
	if err := checkSession(b.SessionID); err != nil {
		return contract.SearchAnswer{}, err
	}
	var out contract.SearchAnswer
	return out, c.call(ctx, contract.SubjectSearch, b, &out)
}

// Expanded is one page of Expand: stored messages, each with its state
// (States[i] is Messages[i]'s), and the After of the next page (0 on the
// last).
type Expanded struct {
	SessionID string                  `json:"session_id"`
	Messages  []Message               `json:"messages"`
	States    []contract.MessageState `json:"states"`
	Next      int64                   `json:"next,omitempty"`
	// Omitted are messages over one answer: read each with Message.
	Omitted []int64 `json:"omitted,omitempty"`
}

// Expand reads one page of the originals behind a compaction, a tool call
// and its results, or a seq range (contract.ExpandBody); ExpandAll every
// page.
func (c *Client) Expand(ctx context.Context, b contract.ExpandBody) (Expanded, error) {
	if err := checkSession(b.SessionID); err != nil {
		return Expanded{}, err
	}
	var out Expanded
	return out, c.call(ctx, contract.SubjectExpand, b, &out)
}

// ExpandAll reads every page of an Expand, and each omitted message whole
// (its state left empty), in seq order.
func (c *Client) ExpandAll(ctx context.Context, b contract.ExpandBody) ([]Message, []contract.MessageState, error) {
	var msgs []Message
	var states []contract.MessageState
	for {
		page, err := c.Expand(ctx, b)
		if err != nil {
			return msgs, states, err
		}
		msgs, states = append(msgs, page.Messages...), append(states, page.States...)
		for _, seq := range page.Omitted {
			m, err := c.Message(ctx, b.SessionID, seq)
			if err != nil {
				return msgs, states, err
			}
			msgs, states = append(msgs, m), append(states, "")
		}
		if page.Next == 0 {
			order := make([]int, len(msgs))
			for i := range order {
				order[i] = i
			}
			sort.SliceStable(order, func(i, j int) bool { return msgs[order[i]].Seq < msgs[order[j]].Seq })
			sorted, sortedStates := make([]Message, len(msgs)), make([]contract.MessageState, len(msgs))
			for i, k := range order {
				sorted[i], sortedStates[i] = msgs[k], states[k]
			}
			return sorted, sortedStates, nil
		}
		b.After = page.Next
	}
}
