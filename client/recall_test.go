package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
)

// Recall through the endpoints: what a compaction summarised or cleared is
// found by a search for it (its state and the compaction that stands for
// it named), read back whole by expand, page after page; what is
// appended after a search is found by the next one; a deleted session is
// not found, and one created again under its id is searched anew.
func TestRecallThroughTheClient(t *testing.T) {
	c := setup(t, nil)
	ctx := context.Background()
	msgs := turns(0, 30)
	call := client.Message{ID: "read", Role: client.Assistant, ToolCalls: []client.ToolCall{{ID: "call_read_1", Type: "function",
		Function: client.FunctionCall{Name: "read_file", Arguments: `{"path":"src/baggage/router_v2.py"}`}}}}
	result := client.Message{ID: "read-out", Role: client.Tool, ToolCallID: "call_read_1",
		Content: client.Content{Text: "def route(bag):\n    raise LostBagError('BAG-0007 never scanned at LIS')\n" + strings.Repeat("    pass\n", 400)}}
	msgs = append(msgs[:10], append([]client.Message{call, result}, msgs[10:]...)...)
	if _, err := c.Create(ctx, "rec", client.NewSession{ContextLimit: 1500, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	done, err := c.CompactSync(ctx, "rec", client.CompactRequest{RequestID: "r1"})
	if err != nil || done.CompactionMessageID == "" {
		t.Fatalf("compact: %+v %v", done, err)
	}
	view, _ := c.Context(ctx, "rec")

	// A summarised message, by its identifier.
	found, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "where is BAG-0003?"})
	if err != nil || len(found.Hits) == 0 {
		t.Fatalf("search: %+v %v", found, err)
	}
	top := found.Hits[0]
	if top.State != contract.StateSummarised || top.CompactionID != view.CompactionID || !snippetHas(top, "BAG-0003") || found.HeadSeq != 62 {
		t.Fatalf("the first hit %+v (head %d), want BAG-0003's, summarised by %s", top, found.HeadSeq, view.CompactionID)
	}
	for _, p := range top.Snippet {
		if d := p.Seq - top.Seq; d < -1 || d > 1 {
			t.Fatalf("a snippet part %d away from its hit", d)
		}
	}
	// A file name, whole: the tool call that read it comes first.
	file, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "router_v2.py", Limit: 1})
	if err != nil || len(file.Hits) != 1 || file.Hits[0].ID != "read" && file.Hits[0].ID != "read-out" {
		t.Fatalf("search for a file: %+v %v", file, err)
	}
	// The latest that hold a phrase as written, filtered by role.
	latest, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "IS IN LISBON", Mode: contract.SearchSubstring, Roles: []string{"assistant"}, Limit: 3})
	if err != nil || len(latest.Hits) != 3 || latest.Hits[0].Seq != 62 || latest.Hits[1].Seq != 60 || latest.Hits[2].Seq != 58 {
		t.Fatalf("substring search: %+v %v", latest, err)
	}
	var bad *client.Error
	if _, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "([", Mode: contract.SearchRegex}); !errors.As(err, &bad) || bad.Code != 400 {
		t.Fatalf("a bad expression: %v", err)
	}
	// Appended after the search: found by the next one, raw.
	if _, err := c.Append(ctx, "rec", []client.Message{client.Text("late", client.User, "and the crate labelled CRATE-4242?")}); err != nil {
		t.Fatal(err)
	}
	late, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "CRATE-4242"})
	if err != nil || len(late.Hits) == 0 || late.Hits[0].ID != "late" || late.Hits[0].State != contract.StateRaw || late.HeadSeq != 63 {
		t.Fatalf("search after an append: %+v %v", late, err)
	}

	// Expand: what the summary stands for, page by page (10 a page).
	all, states, err := c.ExpandAll(ctx, contract.ExpandBody{SessionID: "rec", CompactionID: view.CompactionID, Limit: 10})
	if err != nil || len(all) < 20 {
		t.Fatalf("expand the compaction: %d messages, %v", len(all), err)
	}
	for i, m := range all {
		if states[i] != contract.StateSummarised || i > 0 && m.Seq != all[i-1].Seq+1 {
			t.Fatalf("expanded message %d: seq %d, state %s", i, m.Seq, states[i])
		}
	}
	tool, err := c.Expand(ctx, contract.ExpandBody{SessionID: "rec", ToolCallID: "call_read_1"})
	if err != nil || len(tool.Messages) != 2 || tool.Messages[0].ID != "read" || tool.Messages[1].Content.Text != result.Content.Text || tool.Next != 0 {
		t.Fatalf("expand a tool call: %+v %v", tool, err)
	}
	if _, err := c.Expand(ctx, contract.ExpandBody{SessionID: "rec", ToolCallID: "call_never"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("expand an unknown call: %v", err)
	}

	// Deleted, then created again under the same id: searched anew.
	if _, err := c.Delete(ctx, "rec"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "BAG-0003"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("search a deleted session: %v", err)
	}
	if _, err := c.Create(ctx, "rec", client.NewSession{ContextLimit: 1500, Messages: turns(100, 2)}); err != nil {
		t.Fatal(err)
	}
	again, err := c.Search(ctx, contract.SearchBody{SessionID: "rec", Query: "BAG-0003 BAG-0101"})
	if err != nil || len(again.Hits) == 0 || !snippetHas(again.Hits[0], "BAG-0101") || snippetHas(again.Hits[0], "BAG-0003") {
		t.Fatalf("search of the new session: %+v %v", again, err)
	}
}

func snippetHas(h contract.SearchHit, s string) bool {
	for _, p := range h.Snippet {
		if strings.Contains(p.Text, s) {
			return true
		}
	}
	return false
}

// A runtime that runs its tools itself passes the model's recall calls to
// RunTool: the text of the tool result, or an error to tell the model.
func TestRunTool(t *testing.T) {
	c := setup(t, nil)
	ctx := context.Background()
	if _, err := c.Create(ctx, "tools", client.NewSession{ContextLimit: 1500, Messages: turns(0, 30)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompactSync(ctx, "tools", client.CompactRequest{RequestID: "t1"}); err != nil {
		t.Fatal(err)
	}
	text, err := c.RunTool(ctx, "tools", contract.ToolSearchHistory, []byte(`{"query":"BAG-0002","limit":2}`))
	if err != nil || !strings.Contains(text, "hits for \"BAG-0002\"") || !strings.Contains(text, "BAG-0002 is in Lisbon") || !strings.Contains(text, "expand_history compaction_id=") {
		t.Fatalf("search_history: %v\n%s", err, text)
	}
	page, err := c.RunTool(ctx, "tools", contract.ToolExpandHistory, []byte(`{"from_seq":3,"to_seq":4}`))
	if err != nil || !strings.HasPrefix(page, "#3 user [summarised]: question 1") || !strings.Contains(page, "#4 assistant") {
		t.Fatalf("expand_history: %v\n%s", err, page)
	}
	var bad *client.Error
	if _, err := c.RunTool(ctx, "tools", contract.ToolSearchHistory, []byte(`{"query":"x","session_id":"other"}`)); !errors.As(err, &bad) || bad.Code != 400 {
		t.Fatalf("an argument the tool has not: %v", err)
	}
	if _, err := c.RunTool(ctx, "tools", "rm_rf", nil); err == nil {
		t.Fatal("an unknown tool ran")
	}
}
