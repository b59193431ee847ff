package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The contract's types: what the service sends and takes, field for field
// as the JSON Schemas in the repository's schemas/ directory name them.
// The client decodes the service's JSON into these; nothing here is the
// service's own type, so the client's API changes only with the contract.

// Role is a message's role.
type Role string

// Roles.
const (
	System    Role = "system"
	User      Role = "user"
	Assistant Role = "assistant"
	Tool      Role = "tool"
)

// Message is a chat message in OpenAI's chat format (role, content, name,
// tool_calls, tool_call_id) with what the service keeps beside it: the
// client's id, the session's seq, the token count, and on a compaction
// message its metadata. What a provider takes is the chat fields alone:
// ToOpenAI in the adapt package writes them.
type Message struct {
	// ID is the client's id for the message: an append repeated with
	// the same id is applied once. The service makes one when it is empty.
	ID string `json:"id,omitempty"`
	// Seq is the message's place in the session, from 1 (set by the
	// service).
	Seq     int64   `json:"seq,omitempty"`
	Role    Role    `json:"role"`
	Content Content `json:"content"`
	// Name is the participant's (or, on a tool message, the tool's) name.
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// Tokens is the message's count in the session model's encoding, per-
	// message overhead included (0: not counted yet).
	Tokens int `json:"tokens,omitempty"`
	// IsCompaction marks the summary of older messages; Compaction says
	// what it covers.
	IsCompaction bool        `json:"is_compaction,omitempty"`
	Compaction   *Compaction `json:"compaction,omitempty"`
	// SummarisedBy is the id of the compaction that covers this message
	// (History only).
	SummarisedBy string `json:"summarised_by,omitempty"`
}

// Text returns a message with text content. id is the client's id for it:
// an append repeated with the same id is applied once.
func Text(id string, role Role, text string) Message {
	return Message{ID: id, Role: role, Content: Content{Text: text}}
}

// Content is a message's content: a string (Text), or a list of content
// parts in OpenAI's format (Parts, each kept as its JSON: text,
// image_url, input_audio, file), whose text parts Text joins.
type Content struct {
	Text  string
	Parts []json.RawMessage
	// Empty records content sent as "" rather than null or absent: it is
	// written back as "".
	Empty bool
}

// TextPart is a text content part.
func TextPart(text string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"type": "text", "text": text})
	return b
}

// ImagePart is an image content part: an https URL or a data URL
// (data:image/png;base64,...). detail is "low", "high", "auto" or "".
func ImagePart(url, detail string) json.RawMessage {
	img := map[string]string{"url": url}
	if detail != "" {
		img["detail"] = detail
	}
	b, _ := json.Marshal(map[string]any{"type": "image_url", "image_url": img})
	return b
}

// MarshalJSON writes the parts when there are any, else the text (null
// when there is none).
func (c Content) MarshalJSON() ([]byte, error) {
	if c.Parts != nil {
		return json.Marshal(c.Parts)
	}
	if c.Text == "" && !c.Empty {
		return []byte("null"), nil
	}
	return json.Marshal(c.Text)
}

// UnmarshalJSON reads a string, null, or an array of content parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || bytes.Equal(b, []byte("null")):
		*c = Content{}
		return nil
	case b[0] == '"':
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
		var texts []string
		for i, p := range parts {
			var part struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(p, &part); err != nil {
				return fmt.Errorf("content part %d: %w", i, err)
			}
			if part.Text != "" {
				texts = append(texts, part.Text)
			}
		}
		*c = Content{Text: strings.Join(texts, "\n"), Parts: parts}
		return nil
	}
	return errors.New("content must be a string, null or an array of parts")
}

// ToolCall is a function call an assistant message makes.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall names the function and carries its arguments as JSON text.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Compaction is what a compaction message covers and what it did.
type Compaction struct {
	SummaryText string `json:"summary_text"`
	// FromSeq and ToSeq bound what this compaction summarised (the summary
	// covers everything up to ToSeq); TailStartSeq is the first message
	// kept raw after it.
	FromSeq      int64  `json:"from_seq"`
	ToSeq        int64  `json:"to_seq"`
	FromID       string `json:"from_id"`
	ToID         string `json:"to_id"`
	TailStartID  string `json:"tail_start_id,omitempty"`
	TailStartSeq int64  `json:"tail_start_seq"`
	// Previous is the compaction this one followed.
	Previous       string    `json:"previous_compaction_id,omitempty"`
	Messages       int       `json:"messages_summarised"`
	TokensBefore   int       `json:"tokens_before"`
	TokensAfter    int       `json:"tokens_after"`
	SummaryTokens  int       `json:"summary_tokens"`
	SummaryModel   string    `json:"summary_model"`
	IdempotencyKey string    `json:"idempotency_key"`
	RequestID      string    `json:"request_id,omitempty"`
	Incremental    bool      `json:"incremental"`
	Chunks         int       `json:"chunks"`
	LLMCalls       int       `json:"llm_calls"`
	Pinned         []int64   `json:"pinned_seqs,omitempty"`
	CreatedAt      time.Time `json:"created_at"`
	// Step is "summarise" or "clear_tool_results" (only cleared).
	Step           string `json:"step,omitempty"`
	SummaryFromSeq int64  `json:"summary_from_seq,omitempty"`
	SummaryToSeq   int64  `json:"summary_to_seq,omitempty"`
	// Cleared are the raw messages the context shows as placeholders;
	// ClearedNow and ClearedTokens what this compaction cleared.
	Cleared       []Cleared `json:"cleared,omitempty"`
	ClearedNow    int       `json:"cleared_now,omitempty"`
	ClearedTokens int       `json:"cleared_tokens,omitempty"`
	// Ledger is the artifact ledger of what the summary covers (files,
	// commands, errors, tests, references, instructions, the working
	// state), as JSON; LedgerBullets the bullets the summary shows of it.
	Ledger              json.RawMessage `json:"ledger,omitempty"`
	LedgerBullets       []string        `json:"ledger_bullets,omitempty"`
	InstructionsDropped int             `json:"instructions_dropped,omitempty"`
	// PrefixKeptTokens is how many leading tokens of the context are the
	// same as before it (what a provider's prompt cache keeps).
	PrefixKeptTokens int `json:"prefix_kept_tokens,omitempty"`
}

// Cleared is a raw message the context shows as a placeholder (a tool
// result's content, or a tool call's arguments); Message recalls it.
type Cleared struct {
	Seq            int64  `json:"seq"`
	ID             string `json:"id"`
	Kind           string `json:"kind"` // "tool_result" or "tool_arguments"
	Tool           string `json:"tool,omitempty"`
	Tokens         int    `json:"tokens"`
	RenderedTokens int    `json:"rendered_tokens,omitempty"`
	Encoding       string `json:"encoding,omitempty"`
}

// Created answers Create: the session as stored.
type Created struct {
	SessionID    string `json:"session_id"`
	Model        string `json:"model"`
	ContextLimit int    `json:"context_limit"`
	Messages     int    `json:"messages"`
	HeadSeq      int64  `json:"head_seq"`
	Tokens       int    `json:"tokens"`
}

// Appended answers Append.
type Appended struct {
	SessionID string `json:"session_id"`
	// Status is "applied", or "already_applied" when every message was
	// stored already under its id (a repeat: nothing changed).
	Status   string            `json:"status"`
	HeadSeq  int64             `json:"head_seq"`
	Messages []AppendedMessage `json:"messages"`
	// IDs, FirstSeq and LastSeq sum up Messages.
	IDs      []string `json:"ids"`
	FirstSeq int64    `json:"first_seq"`
	LastSeq  int64    `json:"last_seq"`
	// Bytes is the size of the text applied, to estimate tokens from.
	Bytes int `json:"bytes"`
}

// AppendedMessage says where one appended message is, and whether this
// append wrote it.
type AppendedMessage struct {
	ID      string `json:"id"`
	Seq     int64  `json:"seq"`
	Applied bool   `json:"applied"`
}

// ContextView is what to send to the model now: the system prompt and
// pinned messages, the summary, then the messages after it (tool outputs
// cleared by a compaction as placeholders).
type ContextView struct {
	SessionID    string    `json:"session_id"`
	Model        string    `json:"model"`
	ContextLimit int       `json:"context_limit"`
	HeadSeq      int64     `json:"head_seq"`
	Tokens       int       `json:"tokens"`
	CompactionID string    `json:"compaction_id,omitempty"`
	Messages     []Message `json:"messages"`
}

// Deleted answers Delete (the same whether the session existed or not).
type Deleted struct {
	SessionID string `json:"session_id"`
	Deleted   bool   `json:"deleted"`
}

// Record is a session's stored record.
type Record struct {
	SessionID    string    `json:"session_id"`
	Model        string    `json:"model,omitempty"`
	ContextLimit int       `json:"context_limit,omitempty"`
	HeadSeq      int64     `json:"head_seq"`
	Bytes        int64     `json:"bytes,omitempty"`
	PinnedSeqs   []int64   `json:"pinned_seqs,omitempty"`
	TailStartID  string    `json:"tail_start_id,omitempty"`
	TailStartSeq int64     `json:"tail_start_seq,omitempty"`
	CompactionID string    `json:"compaction_id,omitempty"`
	Compactions  int       `json:"compactions,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// History is a session's record, every message (summarised ones with
// SummarisedBy), every compaction, and its prepared compaction if any.
type History struct {
	Record      Record     `json:"record"`
	Messages    []Message  `json:"messages"`
	Compactions []Message  `json:"compactions"`
	Prepared    []Prepared `json:"prepared"`
}

// Prepared is a compaction computed ahead of the request that will
// commit it.
type Prepared struct {
	SessionID string `json:"session_id"`
	// State is "preparing", "ready" or "failed".
	State string `json:"state"`
	// Base is the compaction it was built on; HeadSeq the head it read.
	Base    string `json:"base_compaction_id"`
	HeadSeq int64  `json:"head_seq"`
	FromSeq int64  `json:"from_seq,omitempty"`
	ToSeq   int64  `json:"to_seq,omitempty"`
	Budget  int    `json:"budget,omitempty"`
	// Compaction is the compaction message, when ready.
	Compaction   *Message  `json:"compaction,omitempty"`
	Owner        string    `json:"owner,omitempty"`
	StartedAt    time.Time `json:"started_at"`
	Heartbeat    time.Time `json:"heartbeat,omitzero"`
	ReadyAt      time.Time `json:"ready_at,omitzero"`
	LLMCalls     int       `json:"llm_calls,omitempty"`
	InputTokens  int       `json:"input_tokens,omitempty"`
	OutputTokens int       `json:"output_tokens,omitempty"`
	Trigger      string    `json:"trigger,omitempty"`
	Error        string    `json:"error,omitempty"`
	// Usable says a request would commit it now.
	Usable bool `json:"usable"`
}

// Breaker is a session's circuit breaker.
type Breaker struct {
	SessionID string `json:"session_id"`
	// State is "closed" or "open".
	State     string     `json:"state"`
	Failures  int        `json:"failures"`
	LastError string     `json:"last_error,omitempty"`
	OpenedAt  *time.Time `json:"opened_at,omitempty"`
	ProbeAt   *time.Time `json:"probe_at,omitempty"`
	UpdatedAt time.Time  `json:"updated_at,omitzero"`
	// FailedRequests are the requests counted in Failures; OpenedBy the
	// one that opened it; OutageAt the last retryable failure counted.
	FailedRequests []string   `json:"failed_requests,omitempty"`
	OpenedBy       string     `json:"opened_by,omitempty"`
	OutageAt       *time.Time `json:"outage_at,omitempty"`
}

// Open reports whether the breaker is open.
func (b Breaker) Open() bool { return b.State == "open" }

// Trigger is what asks for a compaction.
type Trigger string

// Triggers of a compaction request.
const (
	// OverBudget: the runtime's context is over its budget, checked before
	// a model call (a ContextOverBudget event).
	OverBudget Trigger = "over_budget"
	// Overflow: the provider refused the call for its length (a
	// context_overflow event).
	Overflow Trigger = "overflow"
	// NearBudget: the context nears its budget (a ContextNearBudget event,
	// sent with Client.NearBudget): the service prepares the coming
	// compaction; no result answers it.
	NearBudget Trigger = "near_budget"
	// Manual: an operator or a runtime asks outside the budget checks
	// (compactor.compact only).
	Manual Trigger = "manual"
)

// Outcome is what a completed compaction request did.
type Outcome string

// Outcomes of a completed request.
const (
	OutcomeCompacted        Outcome = "compacted"
	OutcomeNoop             Outcome = "noop"              // the context fits already
	OutcomeAlreadyCompacted Outcome = "already_compacted" // nothing new since the last compaction
	OutcomeNothingToCompact Outcome = "nothing_to_compact"
)

// Completed is the data of a CompactionCompleted event.
type Completed struct {
	SessionID           string  `json:"session_id"`
	RequestID           string  `json:"request_id"`
	Trigger             Trigger `json:"trigger"`
	Outcome             Outcome `json:"outcome"`
	Decision            string  `json:"decision,omitempty"`
	IdempotencyKey      string  `json:"idempotency_key,omitempty"`
	CompactionMessageID string  `json:"compaction_message_id,omitempty"`
	TailStartID         string  `json:"tail_start_id,omitempty"`
	MessagesSummarised  int     `json:"messages_summarised"`
	TokensBefore        int     `json:"tokens_before"`
	TokensAfter         int     `json:"tokens_after"`
	ContextLimit        int     `json:"context_limit,omitempty"`
	SummaryTokens       int     `json:"summary_tokens"`
	Incremental         bool    `json:"incremental"`
	Chunks              int     `json:"chunks"`
	LLMCalls            int     `json:"llm_calls"`
	InputTokens         int     `json:"summary_input_tokens"`
	OutputTokens        int     `json:"summary_output_tokens"`
	SummaryModel        string  `json:"summary_model,omitempty"`
	// Strategy is how it reduced the context: one of Strategies
	// (StrategyCleared, StrategySingle, ...).
	Strategy         string `json:"strategy,omitempty"`
	PrefixKeptTokens int    `json:"prefix_kept_tokens"`
	CacheWriteTokens int    `json:"cache_write_tokens"`
	// CacheState is "warm" or "cold" when the request told its cache.
	CacheState          string `json:"cache_state,omitempty"`
	ToolResultsCleared  int    `json:"tool_results_cleared"`
	ClearedTokens       int    `json:"cleared_tokens"`
	PreparedAgeMS       int64  `json:"prepared_age_ms,omitempty"`
	InstructionsDropped int    `json:"instructions_dropped,omitempty"`
	DurationMS          int64  `json:"duration_ms"`
}

// Reason is why a compaction request failed.
type Reason string

// Failure reasons (a Failed's Reason).
const (
	ReasonSummaryFailed        Reason = "summary_failed"
	ReasonPersistFailed        Reason = "persist_failed"
	ReasonCircuitOpen          Reason = "circuit_open"
	ReasonSessionNotFound      Reason = "session_not_found"
	ReasonInvalidRequest       Reason = "invalid_request"
	ReasonInsufficientProgress Reason = "insufficient_progress"
	ReasonInvariantViolated    Reason = "invariant_violated"
	ReasonConfiguration        Reason = "configuration_error"
	ReasonCorruptSession       Reason = "corrupt_session"
	ReasonQuotaExceeded        Reason = "quota_exceeded"
)

// Failed is the data of a CompactionFailed event.
type Failed struct {
	SessionID string `json:"session_id"`
	RequestID string `json:"request_id"`
	Trigger   string `json:"trigger"`
	Reason    Reason `json:"reason"`
	Error     string `json:"error"`
	// Failures counts the session's breaker's failures so far.
	Failures int `json:"failures"`
	// Retryable: the same request may succeed later (the model was
	// unavailable; a quota has room again after RetryAfterMS).
	Retryable    bool   `json:"retryable"`
	Quota        string `json:"quota,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	LLMCalls     int    `json:"llm_calls"`
	InputTokens  int    `json:"summary_input_tokens"`
	OutputTokens int    `json:"summary_output_tokens"`
	DurationMS   int64  `json:"duration_ms"`
}

// CircuitOpened is the data of a CompactionCircuitOpened event.
type CircuitOpened struct {
	SessionID string    `json:"session_id"`
	Failures  int       `json:"failures"`
	LastError string    `json:"last_error"`
	OpenedAt  time.Time `json:"opened_at"`
}

// CircuitClosed is the data of a CompactionCircuitClosed event.
type CircuitClosed struct {
	SessionID string    `json:"session_id"`
	Failures  int       `json:"failures"`
	ClosedAt  time.Time `json:"closed_at"`
	// By is "operator" (a reset) or "probe" (a successful half-open
	// probe).
	By string `json:"by"`
}

// CacheData is a request's prompt cache: when the runtime last sent the
// context to its model, and how long its provider keeps a prefix cached.
type CacheData struct {
	LastRequestTime time.Time `json:"last_request_time"`
	TTLSeconds      int       `json:"ttl_seconds"`
}

// Strategies of a completed result: how it reduced the context.
const (
	// StrategyCleared: tool results cleared, no model call.
	StrategyCleared = "cleared"
	// StrategySingle, StrategyChunked, StrategyIncremental: a summary, of
	// what was selected at once, in chunks, or of what is new since the
	// summary in force.
	StrategySingle      = "single"
	StrategyChunked     = "chunked"
	StrategyIncremental = "incremental"
	// StrategyPrepared: a compaction prepared ahead, committed with no
	// model call; StrategyPreparedTopUp: the messages since summarised on
	// top of one.
	StrategyPrepared      = "prepared"
	StrategyPreparedTopUp = "prepared_topup"
	// StrategyResumed, StrategyExisting, StrategyRedelivered: a compaction
	// made before (a half-done one finished; another request's; this
	// request's, answered again).
	StrategyResumed     = "resumed"
	StrategyExisting    = "existing"
	StrategyRedelivered = "redelivered"
)

// Strategies lists every strategy a result may name.
var Strategies = []string{StrategyCleared, StrategySingle, StrategyChunked, StrategyIncremental, StrategyPrepared,
	StrategyPreparedTopUp, StrategyResumed, StrategyExisting, StrategyRedelivered}
