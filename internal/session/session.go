// Package session defines the stored shape of an agent session: its record,
// its messages in OpenAI chat format, and the compaction messages that
// summarise older parts of it. It holds data only; the pipeline decides what
// to do with it and the stores decide where it lives.
package session

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/compactor/compactor/internal/ledger"

	"github.com/google/uuid"
)

// Role is the author of a chat message.
type Role string

// The roles of the OpenAI chat format.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Valid reports whether r is one of the four chat roles.
func (r Role) Valid() bool {
	switch r {
	case RoleSystem, RoleUser, RoleAssistant, RoleTool:
		return true
	}
	return false
}

// Content is a message's content: either a plain string or a list of content
// parts. Parts are kept as raw JSON so that images and other part types
// survive a round trip; Text holds the concatenated text of the text parts.
type Content struct {
	Text  string
	Parts []json.RawMessage
	// Empty records that the content was sent as the empty string "", not
	// as null or left out: it is written back as "" (OpenAI refuses a null
	// content on a tool message).
	Empty bool
}

// TextContent returns a Content holding a plain string.
func TextContent(s string) Content { return Content{Text: s} }

// IsZero reports whether the content is absent or empty (JSON null, missing
// or "").
func (c Content) IsZero() bool { return c.Text == "" && c.Parts == nil }

// Equal reports whether two contents say the same: the same text and parts.
// An absent content and "" are equal (they mean the same to a model).
func (c Content) Equal(o Content) bool {
	if c.Text != o.Text || len(c.Parts) != len(o.Parts) || (c.Parts == nil) != (o.Parts == nil) {
		return false
	}
	for i := range c.Parts {
		if !sameJSON(c.Parts[i], o.Parts[i]) {
			return false
		}
	}
	return true
}

// sameJSON reports whether two JSON texts are the same but for
// insignificant white space (a stored part is written compacted).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// MarshalJSON writes the parts array when the content came as parts, a string
// otherwise ("" when it was sent so), and null when there is no content.
func (c Content) MarshalJSON() ([]byte, error) {
	if c.Parts != nil {
		return json.Marshal(c.Parts)
	}
	if c.Text == "" && !c.Empty {
		return []byte("null"), nil
	}
	return json.Marshal(c.Text)
}

// UnmarshalJSON accepts a string, null, or an array of content parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*c = Content{}
		return nil
	case b[0] == '"':
		if s, ok := Unquote(b); ok {
			*c = Content{Text: s, Empty: s == ""}
			return nil
		}
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content{Text: s, Empty: s == ""}
		return nil
	case b[0] == '[':
		var parts []json.RawMessage
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var sb strings.Builder
		for i, p := range parts {
			var part struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(p, &part); err != nil {
				return fmt.Errorf("content part %d: %w", i, err)
			}
			if part.Text == "" {
				continue
			}
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.WriteString(part.Text)
		}
		*c = Content{Text: sb.String(), Parts: parts}
		return nil
	}
	return errors.New("content must be a string, null or an array of parts")
}

// ToolCall is one function call requested by an assistant message.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its JSON-encoded arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Message is one chat message plus the fields the store adds. Messages are
// immutable once stored, apart from SummarisedBy, which a compaction sets.
type Message struct {
	ID string `json:"id"`
	// Seq is the message's place in the session, from 1; a compaction
	// message is answered without one (it has no place in the sequence:
	// its compaction's from_seq and to_seq say what it covers).
	Seq        int64      `json:"seq,omitempty"`
	Role       Role       `json:"role"`
	Content    Content    `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Tokens is the message's token count for the session model's encoding,
	// including the per-message overhead. Zero means not counted yet.
	Tokens int `json:"tokens,omitempty"`
	// IsCompaction marks a compaction message: a summary of older messages.
	IsCompaction bool            `json:"is_compaction,omitempty"`
	Compaction   *CompactionMeta `json:"compaction,omitempty"`
	// SummarisedBy is the id of the compaction message that covers this
	// message, as the record's compaction chain says (stores derive it on
	// reading the history, or write it before the record moves its tail).
	SummarisedBy string `json:"summarised_by,omitempty"`
}

// Text returns the message's text content.
func (m *Message) Text() string { return m.Content.Text }

// CompactionMeta describes what a compaction message summarises.
type CompactionMeta struct {
	SummaryText string `json:"summary_text"`
	// FromSeq and ToSeq bound the range this compaction summarised in this
	// step (inclusive); the summary itself covers everything up to ToSeq.
	FromSeq        int64  `json:"from_seq"`
	ToSeq          int64  `json:"to_seq"`
	FromID         string `json:"from_id"`
	ToID           string `json:"to_id"`
	TailStartID    string `json:"tail_start_id,omitempty"`
	TailStartSeq   int64  `json:"tail_start_seq"`
	Previous       string `json:"previous_compaction_id,omitempty"`
	Messages       int    `json:"messages_summarised"`
	TokensBefore   int    `json:"tokens_before"`
	TokensAfter    int    `json:"tokens_after"`
	SummaryTokens  int    `json:"summary_tokens"`
	Model          string `json:"summary_model"`
	IdempotencyKey string `json:"idempotency_key"`
	// RequestID is the request that made this compaction: a redelivery of
	// it is answered from here, with the same outcome.
	RequestID   string `json:"request_id,omitempty"`
	Incremental bool   `json:"incremental"`
	Chunks      int    `json:"chunks"`
	LLMCalls    int    `json:"llm_calls"`
	// Pinned lists the seqs of the messages kept verbatim ahead of the summary.
	Pinned    []int64   `json:"pinned_seqs,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Step is the reduction that made this compaction: "summarise" (a
	// summary was written; it may have cleared tool results too) or
	// "clear_tool_results" (only cleared: no model call, the summary in
	// force, if any, is the previous one). Empty in compactions stored
	// before the ladder: "summarise".
	Step string `json:"step,omitempty"`
	// SummaryFromSeq and SummaryToSeq bound what the summary in force
	// covers, over every compaction so far (0 when there is no summary).
	SummaryFromSeq int64 `json:"summary_from_seq,omitempty"`
	SummaryToSeq   int64 `json:"summary_to_seq,omitempty"`
	// Cleared lists the raw messages the context shows as a placeholder:
	// every one cleared so far that is still raw (not summarised since).
	// The originals stay stored; compactor.session.message recalls them.
	Cleared []Cleared `json:"cleared,omitempty"`
	// ClearedNow and ClearedTokens say what this compaction cleared: how
	// many messages, saving how many tokens.
	ClearedNow    int `json:"cleared_now,omitempty"`
	ClearedTokens int `json:"cleared_tokens,omitempty"`
	// Ledger is the artifact ledger of everything the summary in force
	// covers (files, commands, errors and fixes, tests, identifiers), and
	// LedgerBullets the bullets it was rendered into in the summary.
	Ledger        *ledger.Ledger `json:"ledger,omitempty"`
	LedgerBullets []string       `json:"ledger_bullets,omitempty"`
	// InstructionsDropped counts the summary's "User instructions" bullets
	// removed because the user never wrote them.
	InstructionsDropped int `json:"instructions_dropped,omitempty"`
	// PrefixKeptTokens is how many leading tokens of the context it left
	// are identical to the context before it.
	PrefixKeptTokens int `json:"prefix_kept_tokens,omitempty"`
}

// HasSummary reports whether the compaction has a summary in force (a
// compaction that only cleared tool results before any summary has none).
func (m *CompactionMeta) HasSummary() bool { return m.SummaryText != "" }

// Cleared is a raw message the context shows cleared: a tool result's
// content, or a tool call's arguments, replaced by a placeholder that says
// what it was and where to recall it.
type Cleared struct {
	Seq int64  `json:"seq"`
	ID  string `json:"id"`
	// Kind is ClearedResult or ClearedArguments.
	Kind string `json:"kind"`
	// Tool names the tool whose result or arguments were cleared.
	Tool string `json:"tool,omitempty"`
	// Tokens is the message's count before it was cleared.
	Tokens int `json:"tokens"`
	// Rendered is the placeholder message's count in Encoding, so that
	// reading a session does not count every placeholder again.
	Rendered int    `json:"rendered_tokens,omitempty"`
	Encoding string `json:"encoding,omitempty"`
}

// Kinds of Cleared.
const (
	ClearedResult    = "tool_result"
	ClearedArguments = "tool_arguments"
)

// Record is the session's head: what the store needs to rebuild the context
// without reading every message. Updating it is a compaction's commit point.
type Record struct {
	SessionID    string `json:"session_id"`
	Model        string `json:"model,omitempty"`
	ContextLimit int    `json:"context_limit,omitempty"`
	// HeadSeq is the seq of the newest message; seqs start at 1 and have no
	// gaps, so it is also the message count.
	HeadSeq int64 `json:"head_seq"`
	// Bytes is the size of what the session's messages say (TextBytes of
	// each; a message stored in chunks counts its JSON): what a tenant's
	// bytes_stored quota counts.
	Bytes int64 `json:"bytes,omitempty"`
	// PinnedSeqs are kept verbatim ahead of the summary (set by the first
	// compaction).
	PinnedSeqs   []int64   `json:"pinned_seqs,omitempty"`
	TailStartID  string    `json:"tail_start_id,omitempty"`
	TailStartSeq int64     `json:"tail_start_seq,omitempty"`
	CompactionID string    `json:"compaction_id,omitempty"`
	Compactions  int       `json:"compactions,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// Epoch names this incarnation of the session (a new one at every
	// create): a store tags every value of the session with it, so that a
	// value left by a deleted session of the same id is never read as
	// this one's.
	Epoch string `json:"epoch,omitempty"`
	// CreateDigest is the digest of what created the session (CreateDigest):
	// a create repeated with the same content is recognised and succeeds.
	CreateDigest string `json:"create_digest,omitempty"`
	// Pending marks a create still being written (one too large for one
	// atomic write): the session is invisible until the create finishes.
	Pending bool `json:"pending,omitempty"`
	// Deleted marks a session being deleted: invisible, and no write
	// applies to it any more.
	Deleted bool `json:"deleted,omitempty"`
	// Revision is the store's revision of the record, for compare-and-set.
	Revision uint64 `json:"-"`
}

// Visible reports whether the record is a session readers see: not a create
// still being written, not a delete under way.
func (r *Record) Visible() bool { return !r.Pending && !r.Deleted }

// Session is a loaded view of a session: its record, the latest compaction
// (nil when none) and the messages the model still sees raw, in seq order:
// the pinned ones followed by the tail. Summarised holds the messages already
// summarised, and is filled only when the caller asks for the full history.
type Session struct {
	Record     Record
	Summary    *Message
	Messages   []Message
	Summarised []Message
	// Settled says the store found no compaction message written after
	// the one in force (none that an interrupted or racing commit left):
	// a compaction sought by an id other than the one in force is not
	// stored, without another read. False when the store did not look.
	Settled bool
}

// Seqs selects stored messages by seq: From..To (inclusive; To 0 or past
// the head: to the head), or, when Only is set, those seqs (ascending;
// any past the head left out).
type Seqs struct {
	From, To int64
	Only     []int64
}

// Select is the seqs sel names in a session whose head is head,
// ascending.
func (sel Seqs) Select(head int64) []int64 {
	if sel.Only != nil {
		out := make([]int64, 0, len(sel.Only))
		for _, q := range sel.Only {
			if q >= 1 && q <= head {
				out = append(out, q)
			}
		}
		return out
	}
	from, to := max(sel.From, 1), sel.To
	if to <= 0 || to > head {
		to = head
	}
	if from > to {
		return nil
	}
	out := make([]int64, 0, to-from+1)
	for q := from; q <= to; q++ {
		out = append(out, q)
	}
	return out
}

// Commit is everything a compaction writes, applied by a store atomically
// from a reader's point of view: the compaction message and the summarised
// marks first, the record last, with compare-and-set.
type Commit struct {
	SessionID string
	// PrevCompactionID is the compaction the pipeline built on ("" for the
	// first). The store refuses the commit with ErrConflict when the record
	// has moved on to another compaction meanwhile.
	PrevCompactionID string
	Compaction       Message
	Pinned           []int64
	// Summarised are the seqs of the messages this compaction covers.
	Summarised   []int64
	TailStartID  string
	TailStartSeq int64
	Now          time.Time

	// Base is an optional hint that saves a store a read: the record the
	// compaction was planned on (with its revision), from which a store may
	// try its compare-and-set before re-reading.
	Base *Record
}

// AppendOptions qualify an append.
type AppendOptions struct {
	// ExpectedHeadSeq, when set, applies the append only if the session's
	// head seq is this one (optimistic concurrency for a runtime that wants
	// it); otherwise nothing is written and the store answers a
	// *HeadMovedError. An append whose messages are all stored already is
	// answered as such whatever the head.
	ExpectedHeadSeq *int64
}

// Appended is what an append did.
type Appended struct {
	// Messages are the append's messages as stored, in the order given:
	// a new one with the seq it got, one whose id the session already held
	// with that stored message's seq (a retried append is not applied
	// twice).
	Messages []Message
	// New[i] reports whether Messages[i] was written by this append.
	New []bool
	// HeadSeq is the session's head after the append.
	HeadSeq int64
	// Bytes is the session's Record.Bytes after the append (0 where the
	// store does not say): what every append so far brought, through
	// whichever process, so that one that saw only some of them knows
	// what the others added.
	Bytes int64
}

// Applied counts the messages this append wrote.
func (a Appended) Applied() int {
	n := 0
	for _, ok := range a.New {
		if ok {
			n++
		}
	}
	return n
}

// digestNamespace roots the deterministic ids a create gives messages that
// came without one.
var digestNamespace = uuid.MustParse("7c1d3e0a-4b52-4f0e-9a6b-2d8f5e9c1a07")

// CreateDigest is the digest of a create's content: the model, the limit and
// each message as the runtime gave it (role, content, name, tool calls, tool
// call id and id, if any). Token counts are left out: the store counts them.
func CreateDigest(rec Record, msgs []Message) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	_ = enc.Encode([]any{rec.SessionID, rec.Model, rec.ContextLimit, len(msgs)})
	for i := range msgs {
		m := &msgs[i]
		_ = enc.Encode([]any{m.ID, m.Role, m.Content, m.Name, m.ToolCalls, m.ToolCallID})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// CreatedMessageID is the id a create gives its i-th message when the
// runtime gave it none: derived from the session and the create's digest,
// so a repeated create writes the same ids.
func CreatedMessageID(sessionID, digest string, i int) string {
	return uuid.NewSHA1(digestNamespace, []byte(sessionID+"\x00"+digest+"\x00"+strconv.Itoa(i))).String()
}

// TextBytes is the size of what a message says: its text and content
// parts, name, role and tool calls.
func TextBytes(m *Message) int {
	n := len(m.Content.Text) + len(m.Name) + len(m.Role)
	for _, p := range m.Content.Parts {
		n += len(p)
	}
	for _, tc := range m.ToolCalls {
		n += len(tc.Function.Name) + len(tc.Function.Arguments)
	}
	return n
}
