package client_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/compactor/compactor/client"
)

// chatTurn is a plain chat's i-th exchange: a question and an answer with
// the facts a summary keeps (flights, seats, times, fare codes).
func chatTurn(i int) []client.Message {
	return []client.Message{
		client.Text(fmt.Sprintf("u%d", i), client.User, fmt.Sprintf("Turn %d: my flight HAT%03d on 2024-05-%02d was moved; can you check whether seat %dA is still mine and what the new boarding time is?", i, i, 1+i%28, 10+i%20)),
		client.Text(fmt.Sprintf("a%d", i), client.Assistant, fmt.Sprintf("Flight HAT%03d now departs at %02d:%02d from gate B%d. Seat %dA is still yours; boarding starts 40 minutes before departure, and your fare code Y%02d keeps one free change.", i, 6+i%12, (i*7)%60, i%30, 10+i%20, i)),
	}
}

// A runtime's plain chat loop through the public client, with the default
// settings, at small and usual windows: whenever the context is over its
// limit it asks for a compaction. Every request compacts, to at most 65 %
// of the window (the summary's budget follows from the 60 % headroom
// target, not from max_summary_tokens alone), and the breaker never counts
// a failure. (At 1,200 tokens main failed half of such requests with
// insufficient_progress and left 91 % of the window after the others.)
func TestChatLoopAtSmallWindows(t *testing.T) {
	c := setup(t, nil)
	ctx := context.Background()
	for _, limit := range []int{1200, 1500, 3000, 8000} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			sid := fmt.Sprint("chat-", limit)
			if _, err := c.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: limit, Messages: []client.Message{
				client.Text("sys", client.System, "You are an airline's assistant. Answer briefly and exactly.")}}); err != nil {
				t.Fatal(err)
			}
			requests, worst := 0, 0
			for i := 0; requests < 6 && i < 300; i++ {
				if _, err := c.Append(ctx, sid, chatTurn(i)); err != nil {
					t.Fatal(err)
				}
				view, err := c.Context(ctx, sid)
				if err != nil {
					t.Fatal(err)
				}
				if view.Tokens <= limit {
					continue
				}
				requests++
				res, err := c.Compact(ctx, sid, client.CompactRequest{ContextLimit: limit, RequestedTokens: view.Tokens})
				if err != nil {
					t.Fatal(err)
				}
				if res.Outcome != client.OutcomeCompacted {
					t.Fatalf("request %d at turn %d (%d tokens): %+v", requests, i, view.Tokens, res)
				}
				after := res.TokensAfter
				if after > limit*65/100 {
					t.Errorf("request %d: %d tokens after, over 65 %% of %d", requests, after, limit)
				}
				worst = max(worst, after)
			}
			if requests < 2 {
				t.Fatalf("only %d requests", requests)
			}
			t.Logf("limit %d: %d requests, every one compacted, at most %d tokens after (%.0f %% of the window)", limit, requests, worst, 100*float64(worst)/float64(limit))
			b, err := c.Breaker(ctx, sid)
			if err != nil {
				t.Fatal(err)
			}
			if b.Failures != 0 || b.Open() {
				t.Fatalf("breaker: %+v", b)
			}
		})
	}
}
