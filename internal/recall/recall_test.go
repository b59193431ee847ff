package recall_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/recall"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// Words are stemmed and stop words dropped; an identifier is a term whole
// and in its words.
func TestTerms(t *testing.T) {
	got := recall.Terms("The agent visited src/pkg/parser_v2.go and ORD-1234, then visiting Paris.")
	for _, want := range []string{"agent", "visit", "src/pkg/parser_v2.go", "parser", "v2", "go", "ord-1234", "ord", "1234", "pari"} {
		if !slices.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	for _, stop := range []string{"the", "and", "then"} {
		if slices.Contains(got, stop) {
			t.Errorf("%q holds the stop word %q", got, stop)
		}
	}
	if got := recall.Terms("end."); !slices.Equal(got, []string{"end"}) {
		t.Errorf("a trailing joiner is not part of a word: %q", got)
	}
}

func chat(n int) []session.Message {
	var out []session.Message
	for i := range n {
		out = append(out, session.Message{Seq: int64(2*i + 1), ID: fmt.Sprint("u", i), Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("where is the parcel PKG-%04d I sent to Oslo?", i))},
			session.Message{Seq: int64(2*i + 2), ID: fmt.Sprint("a", i), Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("parcel PKG-%04d reached the depot on day %d", i, i%28+1))})
	}
	return out
}

// A search ranks the message that names what is sought first, filters by
// role, seq and state, and never returns two hits whose snippets would
// overlap.
func TestSearch(t *testing.T) {
	ix := recall.NewIndex()
	msgs := chat(200)
	for i := range msgs {
		ix.Add(recall.DocOf(&msgs[i]))
	}
	ix.Add(recall.DocOf(&msgs[5])) // a seq already indexed: ignored
	if ix.Len() != 400 || ix.Head() != 400 {
		t.Fatalf("%d messages, head %d", ix.Len(), ix.Head())
	}
	hits := ix.Search(recall.Query{Text: "PKG-0123 depot", Limit: 5})
	if len(hits) == 0 || hits[0].Seq != 247 && hits[0].Seq != 248 {
		t.Fatalf("hits %+v, want PKG-0123's exchange first (seq 247 or 248)", hits)
	}
	for i := range hits {
		for j := range i {
			if d := hits[i].Seq - hits[j].Seq; d >= -1 && d <= 1 {
				t.Fatalf("hits %d and %d are neighbours: %+v", i, j, hits)
			}
		}
	}
	users := ix.Search(recall.Query{Text: "PKG-0123", Roles: []string{"user"}, Limit: 3})
	if len(users) == 0 || users[0].Seq != 247 {
		t.Fatalf("user hits %+v, want seq 247 first", users)
	}
	ranged := ix.Search(recall.Query{Text: "parcel", FromSeq: 10, ToSeq: 20, Limit: 50})
	for _, h := range ranged {
		if h.Seq < 10 || h.Seq > 20 {
			t.Fatalf("a hit out of 10..20: %+v", h)
		}
	}
	odd := ix.Search(recall.Query{Text: "parcel depot", Allow: func(seq int64) bool { return seq%2 == 1 }, Limit: 50})
	for _, h := range odd {
		if h.Seq%2 == 0 {
			t.Fatalf("a hit the filter refused: %+v", h)
		}
	}
	if got := ix.Search(recall.Query{Text: "the and of"}); got != nil {
		t.Fatalf("stop words alone: %+v", got)
	}
	// The same messages indexed again answer the same.
	again := recall.NewIndex()
	for i := range msgs {
		again.Add(recall.DocOf(&msgs[i]))
	}
	if a, b := ix.Search(recall.Query{Text: "Oslo parcel PKG-0042"}), again.Search(recall.Query{Text: "Oslo parcel PKG-0042"}); !slices.Equal(a, b) {
		t.Fatalf("two indexes of the same messages answer %+v and %+v", a, b)
	}
}

// A tool call's id names the call and its results.
func TestCalls(t *testing.T) {
	ix := recall.NewIndex()
	msgs := []session.Message{
		{Seq: 1, Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Function: session.FunctionCall{Name: "grep", Arguments: `{"pattern":"TODO"}`}}, {ID: "c2", Function: session.FunctionCall{Name: "ls"}}}},
		{Seq: 2, Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent("a.go:3: TODO")},
		{Seq: 3, Role: session.RoleTool, ToolCallID: "c2", Content: session.TextContent("a.go")},
	}
	for i := range msgs {
		ix.Add(recall.DocOf(&msgs[i]))
	}
	if got := ix.Call("c1"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("call c1: %v", got)
	}
	if got := ix.Search(recall.Query{Text: "grep TODO"}); len(got) == 0 || got[0].Seq > 2 {
		t.Fatalf("a call's name and arguments are searched: %+v", got)
	}
}

// A snippet is the hit and a neighbour each side within its bound, the
// hit cut around what matched, the neighbours by their sides next to it.
func TestSnippet(t *testing.T) {
	counter, _ := tokens.ForEncoding("o200k_base")
	long := strings.Repeat("filler words about nothing in particular. ", 300)
	before := session.Message{Seq: 9, ID: "b", Role: session.RoleUser, Content: session.TextContent("START " + long + " END-OF-BEFORE")}
	hit := session.Message{Seq: 10, ID: "h", Role: session.RoleAssistant, Content: session.TextContent(long + " the key is KEY-777 here " + long)}
	after := session.Message{Seq: 11, ID: "a", Role: session.RoleUser, Content: session.TextContent("START-OF-AFTER " + long)}
	parts := recall.Snippet(&before, &hit, &after, "what is KEY-777?", counter.Count)
	total := 0
	for _, p := range parts {
		total += counter.Count(p.Text)
		if !p.Cut {
			t.Fatalf("part %d is not marked cut", p.Seq)
		}
	}
	if len(parts) != 3 || total > contract.SnippetTokens {
		t.Fatalf("%d parts, %d tokens", len(parts), total)
	}
	if !strings.Contains(parts[1].Text, "KEY-777") || !strings.Contains(parts[0].Text, "END-OF-BEFORE") || !strings.Contains(parts[2].Text, "START-OF-AFTER") {
		t.Fatalf("snippet %+v", parts)
	}
	short := recall.Snippet(nil, &session.Message{Seq: 1, ID: "x", Role: session.RoleUser, Content: session.TextContent("just this")}, nil, "this", counter.Count)
	if len(short) != 1 || short[0].Text != "just this" || short[0].Cut {
		t.Fatalf("a short hit alone: %+v", short)
	}
}

// The cache keeps its bound: the least recently used index goes first,
// and a dropped one is built again by its next user.
func TestCacheBound(t *testing.T) {
	msgs := chat(50)
	build := func(e *recall.Entry) error {
		if e.Index == nil {
			e.Index = recall.NewIndex()
			for i := range msgs {
				e.Index.Add(recall.DocOf(&msgs[i]))
			}
		}
		return nil
	}
	one := recall.NewIndex()
	for i := range msgs {
		one.Add(recall.DocOf(&msgs[i]))
	}
	c := recall.NewCache(3*one.Bytes() + one.Bytes()/2)
	for _, k := range []string{"a", "b", "c", "d"} {
		if err := c.With(k, build); err != nil {
			t.Fatal(err)
		}
	}
	if n, bytes := c.Stats(); n != 3 || bytes > 3*one.Bytes()+one.Bytes()/2 {
		t.Fatalf("%d indexes, %d bytes", n, bytes)
	}
	rebuilt := false
	_ = c.With("a", func(e *recall.Entry) error { rebuilt = e.Index == nil; return build(e) })
	if !rebuilt {
		t.Fatal("the least recently used index was kept past the bound")
	}
	c.Drop("a")
	if n, _ := c.Stats(); n != 2 {
		t.Fatalf("%d indexes after a drop", n)
	}
}

// A tool call's arguments are searched as their values say them: a
// command's escaped lines are words ("\nSELECT" is SELECT), a path whole.
func TestArgumentsAreSearchedUnescaped(t *testing.T) {
	ix := recall.NewIndex()
	m := session.Message{Seq: 1, Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Function: session.FunctionCall{Name: "bash",
		Arguments: `{"command":"cat > q.sql << 'EOF'\nSELECT total\nFROM invoices\nEOF","cwd":"/srv/app"}`}}}}
	ix.Add(recall.DocOf(&m))
	ix.Add(recall.DocOf(&session.Message{Seq: 2, Role: session.RoleUser, Content: session.TextContent("unrelated")}))
	for _, q := range []string{"SELECT", "q.sql", "/srv/app"} {
		if hits := ix.Search(recall.Query{Text: q}); len(hits) == 0 || hits[0].Seq != 1 {
			t.Errorf("%q: %+v", q, hits)
		}
	}
}
