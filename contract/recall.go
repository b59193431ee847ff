package contract

// Recall: a session's stored messages found and read back, whatever
// compaction did with them (compactor.session.search and
// compactor.session.expand).

// The recall endpoints' subjects.
const (
	SubjectSearch = "compactor.session.search"
	SubjectExpand = "compactor.session.expand"
)

// MessageState is what the session's context shows of a stored message.
type MessageState string

// A stored message's states.
const (
	// StateRaw: the context has it as it was (pinned, or in the raw tail).
	StateRaw MessageState = "raw"
	// StateCleared: the context shows a placeholder for its tool result
	// or arguments.
	StateCleared MessageState = "cleared"
	// StateSummarised: only the summary in force stands for it.
	StateSummarised MessageState = "summarised"
)

// MessageStates is every MessageState.
var MessageStates = []MessageState{StateRaw, StateCleared, StateSummarised}

// Search modes.
const (
	// SearchTerms ranks messages by the query's words (stemmed) and
	// identifiers (whole: file paths, ids), BM25 over each message and its
	// neighbours: the default.
	SearchTerms = "terms"
	// SearchSubstring finds the messages holding the query as it is
	// written (any case), latest first.
	SearchSubstring = "substring"
	// SearchRegex finds the messages an RE2 expression matches, latest
	// first.
	SearchRegex = "regex"
)

// Search limits.
const (
	// MaxSearchHits bounds a search's hits (default DefaultSearchHits).
	MaxSearchHits     = 50
	DefaultSearchHits = 10
	// MaxQueryBytes bounds a search's query.
	MaxQueryBytes = 2000
	// SnippetTokens bounds a hit's snippet: the message and a neighbour
	// each side, cut around what matched.
	SnippetTokens = 300
)

// SearchBody is the body of compactor.session.search.
type SearchBody struct {
	SessionID string `json:"session_id"`
	Query     string `json:"query"`
	// Mode is SearchTerms (default), SearchSubstring or SearchRegex.
	Mode string `json:"mode,omitempty"`
	// Roles, States, FromSeq and ToSeq filter the hits (none: all).
	Roles   []string       `json:"roles,omitempty"`
	States  []MessageState `json:"states,omitempty"`
	FromSeq int64          `json:"from_seq,omitempty"`
	ToSeq   int64          `json:"to_seq,omitempty"`
	// Limit is how many hits at most (default DefaultSearchHits, at most
	// MaxSearchHits).
	Limit int `json:"limit,omitempty"`
	// AllSessions searches the caller's tenant's other sessions too (the
	// MaxTenantSearchSessions last written, SessionID's among them), mode
	// terms only: sessions of one project recall each other. Each hit
	// names its session.
	AllSessions bool `json:"all_sessions,omitempty"`
}

// MaxTenantSearchSessions bounds the sessions a search with AllSessions
// reads.
const MaxTenantSearchSessions = 100

// SearchAnswer answers compactor.session.search: the hits, best first.
type SearchAnswer struct {
	SessionID string      `json:"session_id"`
	Query     string      `json:"query"`
	Mode      string      `json:"mode"`
	HeadSeq   int64       `json:"head_seq"`
	Hits      []SearchHit `json:"hits"`
}

// SearchHit is a message that matched, and the snippet that shows it.
type SearchHit struct {
	// SessionID names the hit's session (a search with AllSessions).
	SessionID string       `json:"session_id,omitempty"`
	Seq       int64        `json:"seq"`
	ID        string       `json:"id"`
	Role      string       `json:"role"`
	State     MessageState `json:"state"`
	// CompactionID, on a summarised message, is the compaction whose
	// summary stands for it (expand takes it).
	CompactionID string `json:"compaction_id,omitempty"`
	// Score ranks the hit (terms mode; 0 otherwise).
	Score float64 `json:"score,omitempty"`
	// Snippet is the message and a neighbour each side, within
	// SnippetTokens.
	Snippet []SnippetPart `json:"snippet"`
}

// SnippetPart is one message of a snippet.
type SnippetPart struct {
	Seq   int64        `json:"seq"`
	ID    string       `json:"id"`
	Role  string       `json:"role"`
	Name  string       `json:"name,omitempty"`
	State MessageState `json:"state"`
	// Text is the message's text (its tool calls as "name(arguments)"),
	// cut around what matched when the snippet would be over its bound.
	Text string `json:"text"`
	// Cut says Text is part of the message: expand its seq for the rest.
	Cut bool `json:"cut,omitempty"`
}

// ExpandBody is the body of compactor.session.expand: the originals
// behind a compaction (CompactionID: every message its summary stands
// for), a cleared tool result (ToolCallID: the call and its results), or
// a seq range (FromSeq, ToSeq); one of the three. The answer comes in
// pages: send the same body with After set to the answer's Next.
type ExpandBody struct {
	SessionID    string `json:"session_id"`
	CompactionID string `json:"compaction_id,omitempty"`
	ToolCallID   string `json:"tool_call_id,omitempty"`
	FromSeq      int64  `json:"from_seq,omitempty"`
	ToSeq        int64  `json:"to_seq,omitempty"`
	// After continues a paged answer: the seq the last page ended at.
	After int64 `json:"after,omitempty"`
	// Limit is how many messages a page holds at most (default and at most
	// MaxExpandMessages); a page also stays within MaxExpandBytes.
	Limit int `json:"limit,omitempty"`
}

// Expand limits.
const (
	MaxExpandMessages = 100
	MaxExpandBytes    = 512 << 10
)
