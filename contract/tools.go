package contract

import "encoding/json"

// The recall tools a model calls to get back what compaction summarised
// or cleared: one definition, served in the OpenAI and Anthropic tool
// formats (OpenAITools, AnthropicTools), by `compactor mcp`, and by the
// clients. The session is the runtime's to bind, never the model's to
// name.
const (
	ToolSearchHistory = "search_history"
	ToolExpandHistory = "expand_history"
)

// ToolDef is a tool: its name, what it tells the model, and its
// parameters' JSON Schema.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// SearchHistoryArgs are search_history's arguments.
type SearchHistoryArgs struct {
	Query   string         `json:"query"`
	Mode    string         `json:"mode,omitempty"`
	Roles   []string       `json:"roles,omitempty"`
	States  []MessageState `json:"states,omitempty"`
	FromSeq int64          `json:"from_seq,omitempty"`
	ToSeq   int64          `json:"to_seq,omitempty"`
	Limit   int            `json:"limit,omitempty"`
	// AllSessions searches the tenant's other sessions too.
	AllSessions bool `json:"all_sessions,omitempty"`
}

// ExpandHistoryArgs are expand_history's arguments.
type ExpandHistoryArgs struct {
	// SessionID, when set, is another session of the tenant that a search
	// with all_sessions named (default: the runtime's).
	SessionID    string `json:"session_id,omitempty"`
	CompactionID string `json:"compaction_id,omitempty"`
	ToolCallID   string `json:"tool_call_id,omitempty"`
	FromSeq      int64  `json:"from_seq,omitempty"`
	ToSeq        int64  `json:"to_seq,omitempty"`
	After        int64  `json:"after,omitempty"`
}

// MaxToolResultChars bounds what a recall tool answers the model (about
// 10,000 tokens): an expand past it says where to go on.
const MaxToolResultChars = 40000

// RecallTools are the recall tools.
var RecallTools = []ToolDef{
	{
		Name: ToolSearchHistory,
		Description: "Search this conversation's full history, including the earlier part that was compacted into a summary or whose tool output was cleared. " +
			"Use it when the summary lacks a detail you need: a file, a command, an error, a value, what someone said. " +
			"Each hit shows the matching message (#seq) with a neighbour each side; a summarised one names the compaction_id that expand_history takes.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"query":{"type":"string","description":"Words, names or identifiers to look for (a file name, an error, an id): ranked by relevance. With mode substring, text as written; with mode regex, an RE2 expression.","minLength":1,"maxLength":2000},` +
			`"mode":{"type":"string","enum":["terms","substring","regex"],"description":"terms (default): ranked by the query's words; substring or regex: the latest messages that match"},` +
			`"roles":{"type":"array","items":{"type":"string","enum":["system","user","assistant","tool"]},"description":"only messages of these roles"},` +
			`"states":{"type":"array","items":{"type":"string","enum":["raw","cleared","summarised"]},"description":"only messages the context shows as they were (raw), as a placeholder (cleared), or only through the summary (summarised)"},` +
			`"from_seq":{"type":"integer","minimum":0,"description":"only messages from this #seq"},` +
			`"to_seq":{"type":"integer","minimum":0,"description":"only messages up to this #seq"},` +
			`"limit":{"type":"integer","minimum":1,"maximum":50,"description":"how many hits (default 10)"},` +
			`"all_sessions":{"type":"boolean","description":"also search the other recent conversations of this project (mode terms); a hit from one names its session_id"}` +
			`},"required":["query"],"additionalProperties":false}`),
	},
	{
		Name: ToolExpandHistory,
		Description: "Read back, word for word, messages of this conversation that compaction summarised or cleared: every message a compaction's summary stands for (compaction_id), " +
			"a tool call and its results (tool_call_id, as a cleared placeholder names it), or a #seq range. Long answers come in pages: call again with after set to the last #seq shown.",
		Parameters: json.RawMessage(`{"type":"object","properties":{` +
			`"session_id":{"type":"string","description":"another conversation a search_history hit named (default: this one)"},` +
			`"compaction_id":{"type":"string","description":"the compaction whose originals to read (search_history and the summary's header name it)"},` +
			`"tool_call_id":{"type":"string","description":"the tool call whose call and results to read"},` +
			`"from_seq":{"type":"integer","minimum":0,"description":"the first #seq of a range"},` +
			`"to_seq":{"type":"integer","minimum":0,"description":"the last #seq of a range"},` +
			`"after":{"type":"integer","minimum":0,"description":"go on after this #seq (the last one the previous page showed)"}` +
			`},"additionalProperties":false}`),
	},
}

// OpenAITools is RecallTools in the OpenAI Chat Completions tools format.
func OpenAITools() json.RawMessage {
	type fn struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	}
	type tool struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	out := make([]tool, len(RecallTools))
	for i, t := range RecallTools {
		out[i] = tool{Type: "function", Function: fn(t)}
	}
	b, _ := json.Marshal(out)
	return b
}

// AnthropicTools is RecallTools in the Anthropic Messages tools format.
func AnthropicTools() json.RawMessage {
	type tool struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	out := make([]tool, len(RecallTools))
	for i, t := range RecallTools {
		out[i] = tool{Name: t.Name, Description: t.Description, InputSchema: t.Parameters}
	}
	b, _ := json.Marshal(out)
	return b
}

// Search is the search body of args for session sid.
func (a SearchHistoryArgs) Search(sid string) SearchBody {
	return SearchBody{SessionID: sid, Query: a.Query, Mode: a.Mode, Roles: a.Roles, States: a.States, FromSeq: a.FromSeq, ToSeq: a.ToSeq, Limit: a.Limit,
		AllSessions: a.AllSessions}
}

// Expand is the expand body of args for session sid (or the session args
// name).
func (a ExpandHistoryArgs) Expand(sid string) ExpandBody {
	if a.SessionID != "" {
		sid = a.SessionID
	}
	return ExpandBody{SessionID: sid, CompactionID: a.CompactionID, ToolCallID: a.ToolCallID, FromSeq: a.FromSeq, ToSeq: a.ToSeq, After: a.After}
}
