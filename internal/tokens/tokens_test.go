package tokens_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

func counter(t testing.TB, enc string) *tokens.Counter {
	t.Helper()
	c, err := tokens.ForEncoding(enc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Expected values from ../shared/data/token_vectors.md (openai/tiktoken tests
// and the OpenAI Cookbook).
func TestCountReferenceVectors(t *testing.T) {
	tests := []struct {
		enc, text string
		want      int
	}{
		{"cl100k_base", "hello world", 2},
		{"cl100k_base", "tiktoken is great!", 6},
		{"o200k_base", "tiktoken is great!", 6},
		{"cl100k_base", "antidisestablishmentarianism", 6},
		{"o200k_base", "antidisestablishmentarianism", 6},
		{"p50k_base", "antidisestablishmentarianism", 5},
		{"cl100k_base", "2 + 2 = 4", 7},
		{"o200k_base", "2 + 2 = 4", 7},
		{"cl100k_base", "お誕生日おめでとう", 9},
		{"o200k_base", "お誕生日おめでとう", 8},
		{"cl100k_base", "today\n \n", 2},
		{"cl100k_base", "👍", 3},
		{"cl100k_base", "hello world!你好，世界！", 10},
		{"o200k_base", "hallo world!", 4},
		{"r50k_base", "", 0},
		// Special-token text in user content counts as ordinary text.
		{"cl100k_base", "hello <|endoftext|>", 7},
	}
	for _, tt := range tests {
		t.Run(tt.enc+"/"+tt.text, func(t *testing.T) {
			if got := counter(t, tt.enc).Count(tt.text); got != tt.want {
				t.Fatalf("Count(%q) = %d, want %d", tt.text, got, tt.want)
			}
		})
	}
}

func cookbookMessages() []session.Message {
	m := func(role session.Role, name, content string) session.Message {
		return session.Message{Role: role, Name: name, Content: session.TextContent(content)}
	}
	return []session.Message{
		m("system", "", "You are a helpful, pattern-following assistant that translates corporate jargon into plain English."),
		m("system", "example_user", "New synergies will help drive top-line growth."),
		m("system", "example_assistant", "Things working well together will increase revenue."),
		m("system", "example_user", "Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."),
		m("system", "example_assistant", "Let's talk later when we're less busy about how to do better."),
		m("user", "", "This late pivot means we don't have time to boil the ocean for the client deliverable."),
	}
}

// The Cookbook's num_tokens_from_messages example: 129 with cl100k_base
// (gpt-4, gpt-3.5-turbo-0613), 124 with o200k_base (gpt-4o), both equal to
// the API's prompt_tokens.
func TestContextCookbookChat(t *testing.T) {
	for enc, want := range map[string]int{"cl100k_base": 129, "o200k_base": 124} {
		if got := counter(t, enc).Context(cookbookMessages()); got != want {
			t.Errorf("%s: Context = %d, want %d", enc, got, want)
		}
	}
}

// The Cookbook's num_tokens_for_tools example: 105 (gpt-4, gpt-3.5-turbo)
// and 101 (gpt-4o) with the weather function definition.
func TestToolsCookbook(t *testing.T) {
	msgs := func() []session.Message { // fresh per model: Ensure caches counts on messages
		return []session.Message{
			{Role: "system", Content: session.TextContent("You are a helpful assistant that can answer to questions about the weather.")},
			{Role: "user", Content: session.TextContent("What's the weather like in San Francisco?")},
		}
	}
	fn := tokens.Function{
		Name:        "get_current_weather",
		Description: "Get the current weather in a given location",
		Properties: []tokens.Property{
			{Name: "location", Type: "string", Description: "The city and state, e.g. San Francisco, CA"},
			{Name: "unit", Type: "string", Description: "The unit of temperature to return", Enum: []string{"celsius", "fahrenheit"}},
		},
	}
	for _, tt := range []struct {
		model string
		want  int
	}{{"gpt-4", 105}, {"gpt-3.5-turbo", 105}, {"gpt-4o", 101}, {"gpt-4o-mini", 101}} {
		c, err := tokens.ForModel(tt.model)
		if err != nil {
			t.Fatal(err)
		}
		got := c.Tools([]tokens.Function{fn}) + c.Context(msgs())
		if got != tt.want {
			t.Errorf("%s: tools+messages = %d, want %d", tt.model, got, tt.want)
		}
	}
}

func TestEnsureCountsOnce(t *testing.T) {
	c := counter(t, "o200k_base")
	m := session.Message{Role: "user", Content: session.TextContent("count me once")}
	n := c.Ensure(&m)
	if n == 0 || m.Tokens != n {
		t.Fatalf("Ensure = %d, stored %d", n, m.Tokens)
	}
	m.Content = session.TextContent(strings.Repeat("changed ", 100))
	if got := c.Ensure(&m); got != n {
		t.Fatalf("Ensure recounted: %d, want cached %d", got, n)
	}
}

// A message read again (its count not stored) is counted from the cache:
// its role, name and tool name as well as its texts.
func TestRecountEncodesNothing(t *testing.T) {
	c := counter(t, "o200k_base")
	m := session.Message{Role: "assistant", Name: "bot-7", Content: session.TextContent("ok"),
		ToolCalls: []session.ToolCall{{ID: "c1", Type: "function", Function: session.FunctionCall{Name: "ls", Arguments: "{}"}}}}
	first := c.Message(&m)
	before := tokens.EncodedBytes()
	if again := c.Message(&m); again != first {
		t.Fatalf("counted %d, then %d", first, again)
	}
	if d := tokens.EncodedBytes() - before; d != 0 {
		t.Fatalf("counting the same message again encoded %d bytes", d)
	}
}

func TestToolCallsCounted(t *testing.T) {
	c := counter(t, "o200k_base")
	plain := session.Message{Role: "assistant"}
	call := plain
	call.ToolCalls = []session.ToolCall{{ID: "call_1", Type: "function", Function: session.FunctionCall{Name: "search_flights", Arguments: `{"origin":"JFK","destination":"SEA","date":"2024-05-20"}`}}}
	if c.Message(&call) <= c.Message(&plain)+10 {
		t.Fatalf("tool call not counted: %d vs %d", c.Message(&call), c.Message(&plain))
	}
}

// Counting a long text in pieces must give the count of the whole.
func TestCountLongTextInPieces(t *testing.T) {
	var texts []string
	for _, f := range []string{
		"../../../shared/data/agent_trajectories/openhands/multi_swe_bench_2runs.jsonl",
		"../../../shared/data/agent_trajectories/swe-agent/pydicom-1458__gpt4_default.traj",
	} {
		b, err := os.ReadFile(filepath.FromSlash(f))
		if err != nil {
			continue
		}
		texts = append(texts, string(b[:min(len(b), 100<<10)]))
	}
	texts = append(texts, strings.Repeat("line of log output 0x1f2e\n", 5000), strings.Repeat("x", 12000), strings.Repeat("日本語のテキスト", 900))
	for _, enc := range []string{"o200k_base", "cl100k_base"} {
		c := counter(t, enc)
		for i, text := range texts {
			got := c.Count(text)
			want := c.CountWhole(text)
			// Pieces are cut where the pre-tokeniser cuts, so counts agree
			// exactly for text with lines; a long run without whitespace is
			// cut inside a word and may differ by a token per cut.
			diff := got - want
			if strings.Contains(text, "\n") && diff != 0 || diff < 0 || diff > len(text)/1024+1 {
				t.Errorf("%s text %d (%d bytes): pieces %d, whole %d", enc, i, len(text), got, want)
			}
		}
	}
}

func TestSplitRoundTrip(t *testing.T) {
	c := counter(t, "o200k_base")
	text := strings.Repeat("Grüße aus Köln 🚀 — 数据 path/to/file.go:42\n", 2000)
	parts := c.Split(text, 100)
	if strings.Join(parts, "") != text {
		t.Fatal("Split pieces do not join back to the text")
	}
	for i, p := range parts {
		if n := c.Count(p); n > 102 {
			t.Fatalf("piece %d has %d tokens, want about 100", i, n)
		}
	}
	if got := c.Truncate(text, 7); c.Count(got) > 8 || !strings.HasPrefix(text, got) {
		t.Fatalf("Truncate gave %q", got)
	}
}

func BenchmarkCount(b *testing.B) {
	c := counter(b, "o200k_base")
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		text := strings.Repeat("The reservation ZX81Q for 2024-05-20 costs $451; see /var/log/app.log.\n", size/40+1)[:size]
		b.Run(fmt.Sprintf("bytes=%d", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				c.Count(text)
			}
		})
	}
}

// BenchmarkCountShort: a role counted by the encoder, and from the cache.
func BenchmarkCountShort(b *testing.B) {
	c := counter(b, "o200k_base")
	b.Run("encoder", func(b *testing.B) {
		for b.Loop() {
			c.CountWhole("assistant")
		}
	})
	b.Run("cached", func(b *testing.B) {
		for b.Loop() {
			c.Count("assistant")
		}
	})
}

func BenchmarkEnsureCached(b *testing.B) {
	c := counter(b, "o200k_base")
	m := session.Message{Role: "user", Content: session.TextContent(strings.Repeat("a fact 42 ", 500))}
	c.Ensure(&m)
	b.ReportAllocs()
	for b.Loop() {
		c.Ensure(&m)
	}
}
