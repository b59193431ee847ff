package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/session"
)

// Trigger is why a compaction was requested (the contract's).
type Trigger = contract.Trigger

// Triggers (see contract). Overflow and manual requests compact whatever
// the counts say; over_budget requests compact only when the compactor's
// own count agrees. TriggerNearBudget is not a compaction request but a
// hint to prepare one (Service.Prepare).
const (
	TriggerOverBudget = contract.TriggerOverBudget
	TriggerOverflow   = contract.TriggerOverflow
	TriggerManual     = contract.TriggerManual
	TriggerNearBudget = contract.TriggerNearBudget
)

// Request asks for one compaction of one session.
type Request struct {
	// ID is the request's id (the CloudEvent id); results quote it.
	ID        string
	SessionID string
	Trigger   Trigger
	// Model is the model the runtime sends the context to; empty means the
	// session record's model.
	Model string
	// ContextLimit overrides the model's window for this request.
	ContextLimit int
	// RequestedTokens and MessageCount are the runtime's own figures; they
	// are reported, but the decision uses the compactor's count.
	RequestedTokens int
	MessageCount    int
	// SummaryModel overrides the configured summary model for this request.
	SummaryModel string
	// SummaryProvider overrides the configured summary provider.
	SummaryProvider string
	// SummaryContextLimit overrides the summary model's input limit.
	SummaryContextLimit int
	// Focus is an optional topic for a manual compaction to keep in detail.
	Focus string
	// Cache is the runtime's prompt cache as it last saw it (nil: not
	// known). At is when the request was made (the event's time; zero:
	// when it is handled), the moment the cache is judged at.
	Cache *CacheState
	At    time.Time
}

// cacheState is the request's cache as judged at its time: CacheWarm,
// CacheCold, or "" when it said nothing of it.
func (r Request) cacheState() string {
	switch {
	case r.Cache == nil:
		return ""
	case r.Cache.Cold(r.At):
		return CacheCold
	}
	return CacheWarm
}

// CacheState is a runtime's prompt cache: when it last sent the context
// to its model, and how long its provider keeps an unused prefix cached
// (Anthropic 5 minutes or 1 hour, OpenAI's in-memory retention 5 to 10
// minutes, its extended one 24 hours).
type CacheState struct {
	LastRequest time.Time
	TTL         time.Duration
}

// Cold reports whether the cache has lapsed at t: the next model call
// writes the whole context anew, so a compaction now costs no cached
// prefix.
func (c CacheState) Cold(t time.Time) bool { return !t.Before(c.LastRequest.Add(c.TTL)) }

// maxCacheSkew is how far a request may put its cache's last use after
// its own time (both are the runtime's clock) before it is refused.
const maxCacheSkew = time.Minute

// Cache states a result reports.
const (
	CacheWarm = "warm"
	CacheCold = "cold"
)

// Validate checks the request's fields; it returns an error wrapping
// ErrInvalidRequest.
func (r Request) Validate() error {
	switch {
	case r.SessionID == "":
		return fmt.Errorf("%w: session_id is required", ErrInvalidRequest)
	case !r.Trigger.Compacts():
		return fmt.Errorf("%w: trigger %q is not over_budget, overflow or manual", ErrInvalidRequest, r.Trigger)
	case r.ContextLimit < 0:
		return fmt.Errorf("%w: context_limit must be >= 0, got %d", ErrInvalidRequest, r.ContextLimit)
	case r.SummaryContextLimit < 0:
		return fmt.Errorf("%w: summary_context_limit must be >= 0, got %d", ErrInvalidRequest, r.SummaryContextLimit)
	case r.Cache != nil && r.Cache.TTL < 0:
		return fmt.Errorf("%w: cache.ttl_seconds must be >= 0, got %v", ErrInvalidRequest, r.Cache.TTL.Seconds())
	case r.Cache != nil && r.Cache.LastRequest.IsZero():
		return fmt.Errorf("%w: cache.last_request_time is required with a cache", ErrInvalidRequest)
	case r.Cache != nil && !r.At.IsZero() && r.Cache.LastRequest.After(r.At.Add(maxCacheSkew)):
		return fmt.Errorf("%w: cache.last_request_time %s is after the request's time %s", ErrInvalidRequest,
			r.Cache.LastRequest.Format(time.RFC3339), r.At.Format(time.RFC3339))
	}
	return nil
}

// Outcome is how a completed request ended.
type Outcome string

// Outcomes of a completed request.
const (
	OutcomeCompacted        Outcome = "compacted"
	OutcomeNoop             Outcome = "noop"              // the context already fits
	OutcomeAlreadyCompacted Outcome = "already_compacted" // nothing new since the last compaction
	OutcomeNothingToCompact Outcome = "nothing_to_compact"
)

// Strategy is how a completed request reduced the context (the result's
// strategy).
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
	// made before (a crash's half-done one finished; another request's;
	// this request's, answered again).
	StrategyResumed     = "resumed"
	StrategyExisting    = "existing"
	StrategyRedelivered = "redelivered"
)

// Strategies lists every strategy a result may name.
var Strategies = []string{StrategyCleared, StrategySingle, StrategyChunked, StrategyIncremental, StrategyPrepared,
	StrategyPreparedTopUp, StrategyResumed, StrategyExisting, StrategyRedelivered}

// Result is the answer to one request: the data of a CompactionCompleted
// event, or of a CompactionFailed one when Failed is set.
type Result struct {
	SessionID string `json:"session_id"`
	// Tenant is the session's tenant (its events' subjects say it).
	Tenant    string  `json:"-"`
	RequestID string  `json:"request_id"`
	Trigger   Trigger `json:"trigger"`
	Outcome   Outcome `json:"outcome,omitempty"`
	// Decision says why compaction was or was not needed.
	Decision            string `json:"decision,omitempty"`
	IdempotencyKey      string `json:"idempotency_key,omitempty"`
	CompactionMessageID string `json:"compaction_message_id,omitempty"`
	TailStartID         string `json:"tail_start_id,omitempty"`
	MessagesSummarised  int    `json:"messages_summarised"`
	TokensBefore        int    `json:"tokens_before"`
	TokensAfter         int    `json:"tokens_after"`
	ContextLimit        int    `json:"context_limit,omitempty"`
	SummaryTokens       int    `json:"summary_tokens"`
	Incremental         bool   `json:"incremental"`
	Chunks              int    `json:"chunks"`
	LLMCalls            int    `json:"llm_calls"`
	// InputTokens and OutputTokens are the summary model's usage: as the
	// provider reported it, else as counted here.
	InputTokens  int    `json:"summary_input_tokens"`
	OutputTokens int    `json:"summary_output_tokens"`
	SummaryModel string `json:"summary_model,omitempty"`
	// Strategy names how the compaction was made: "cleared" (tool results
	// cleared, no model call), or how the summary was made: "single",
	// "chunked", "incremental"; "resumed", "existing" and "redelivered"
	// for a compaction made before.
	Strategy string `json:"strategy,omitempty"`
	// PrefixKeptTokens is how many leading tokens of the new context are
	// identical to the old one: a provider's cached prefix stays valid up
	// to there (all of it when nothing changed).
	PrefixKeptTokens int `json:"prefix_kept_tokens"`
	// CacheWriteTokens is what a provider must write to its prompt cache
	// anew on the next turn: the new context's tokens past the kept prefix
	// (TokensAfter less PrefixKeptTokens).
	CacheWriteTokens int `json:"cache_write_tokens"`
	// CacheState is the runtime's prompt cache as the request stated it,
	// judged at the request's time: "warm" or "cold" (omitted when the
	// request said nothing). A cold cache has clearing take every old
	// tool result it may (the context is written anew anyway); a warm one
	// clears in batches, only what the target needs.
	CacheState string `json:"cache_state,omitempty"`
	// ToolResultsCleared and ClearedTokens say what clearing did: the
	// messages it cleared and the tokens that saved.
	ToolResultsCleared int `json:"tool_results_cleared"`
	ClearedTokens      int `json:"cleared_tokens"`
	// PreparedAgeMS is, for a compaction committed from a preparation
	// (strategy "prepared", or "prepared_topup" when the messages since
	// were summarised on top of it), how long before the request the
	// preparation was ready.
	PreparedAgeMS int64 `json:"prepared_age_ms,omitempty"`
	// InstructionsDropped counts the bullets the summariser put under
	// "User instructions" that the user (or a pinned system message)
	// never wrote: they are removed before the summary is stored.
	InstructionsDropped int   `json:"instructions_dropped,omitempty"`
	DurationMS          int64 `json:"duration_ms"`
	// Summary is the summary text now in force (also for already_compacted).
	Summary string `json:"-"`

	// Failure fields.
	Failed    bool   `json:"-"`
	Reason    Reason `json:"reason,omitempty"`
	Error     string `json:"error,omitempty"`
	Failures  int    `json:"failures,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
	// Quota and RetryAfterMS, on a quota_exceeded failure, name the
	// tenant's quota and when it has room again.
	Quota        string `json:"quota,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// CircuitOpened is set on the failure that opened the breaker; Breaker
	// then holds its state for the CompactionCircuitOpened event.
	CircuitOpened bool             `json:"-"`
	Breaker       *session.Breaker `json:"-"`
	// CircuitClosed is set when a half-open probe succeeded and closed the
	// breaker (publish CompactionCircuitClosed); Breaker then holds its
	// state while it was open.
	CircuitClosed bool `json:"-"`
	// attempts counts the plans made (a lost commit race plans again).
	attempts int
}

// SessionStore is what the pipeline needs from session storage.
// Implementations must be safe for concurrent use.
type SessionStore interface {
	// Load returns the session's record, latest compaction and the messages
	// the model sees raw (pinned ones and the tail, in seq order). With
	// history set it also returns the summarised messages. It returns
	// session.ErrNotFound for an unknown session.
	Load(ctx context.Context, sessionID string, history bool) (*session.Session, error)
	// Compaction returns a stored compaction message by id, committed or
	// not; session.ErrNotFound when there is none.
	Compaction(ctx context.Context, sessionID, compactionID string) (*session.Message, error)
	// Commit applies a compaction (see session.Commit). Creating a
	// compaction message that already exists under the same id is not an
	// error: existed reports it (the stored one, another writer's, is the
	// one committed then). It returns session.ErrConflict when the record
	// has moved on from PrevCompactionID (to this very compaction too, when
	// another writer committed it first), and never loses a message
	// appended concurrently.
	Commit(ctx context.Context, c session.Commit) (existed bool, err error)
}

// PreparedStore is a SessionStore that keeps prepared compactions (see
// Service.Prepare): one per session, replaced by compare-and-set.
type PreparedStore interface {
	// Prepared returns the session's prepared compaction with its
	// revision; session.ErrNotFound when there is none.
	Prepared(ctx context.Context, sessionID string) (session.PreparedCompaction, error)
	// PutPrepared writes p when the stored one is still at p.Revision (0:
	// none is stored) and returns it with its new revision, tagged with
	// the session's epoch; session.ErrConflict when another writer moved
	// it first, session.ErrNotFound when the session does not exist.
	PutPrepared(ctx context.Context, p session.PreparedCompaction) (session.PreparedCompaction, error)
}

// BreakerStore keeps the per-session circuit breakers. Every read-modify-
// write is a compare-and-set, so replicas share one count.
type BreakerStore interface {
	// Breaker returns the session's breaker; a closed one with no failures
	// when none is stored.
	Breaker(ctx context.Context, sessionID string) (session.Breaker, error)
	// RecordFailure counts the failure of request requestID (once: a
	// request counted already is not counted again, see Breaker.Fail) and
	// opens the breaker when the count reaches maxFailures. opened is true
	// only for the failure that opened it, so exactly one
	// CompactionCircuitOpened is published.
	RecordFailure(ctx context.Context, sessionID string, f session.Failure, now time.Time) (b session.Breaker, opened bool, err error)
	// Reset closes the breaker and clears its count. It returns the state
	// before the reset (closed with no failures when none was stored).
	Reset(ctx context.Context, sessionID string, now time.Time) (session.Breaker, error)
	// Probe lets one request through an open breaker once cooldown has
	// passed since it opened and since the last probe: it records the probe
	// time and answers true to exactly one caller, across replicas.
	Probe(ctx context.Context, sessionID string, cooldown time.Duration, now time.Time) (session.Breaker, bool, error)
}

// Task is what a summary call is for.
type Task string

// Summary tasks.
const (
	TaskSummarise Task = "summarise" // summarise a chunk of messages
	TaskMerge     Task = "merge"     // merge partial summaries into one
	TaskCondense  Task = "condense"  // shorten one summary to the budget
)

// SummaryRequest is one call to the summary model.
type SummaryRequest struct {
	Model    string
	Provider string
	Task     Task
	// System and Prompt are the rendered instruction and user turn for a
	// model; Messages are what Prompt renders (the chunk's messages, or the
	// summaries being merged as assistant messages), for summarisers that
	// work on structure rather than text.
	System    string
	Prompt    string
	Messages  []session.Message
	MaxTokens int
	Focus     string
	// Encoding is the tiktoken encoding the pipeline counts with (the
	// session model's); a summariser that counts its answer with it may say
	// so in SummaryResponse.Encoding, sparing a second count.
	Encoding string
}

// SummaryResponse is a summary model's answer.
type SummaryResponse struct {
	Text  string
	Model string
	// InputTokens and OutputTokens are the provider's usage figures; zero
	// when it reported none.
	InputTokens  int
	OutputTokens int
	// CacheReadTokens and CacheWriteTokens are the input tokens the
	// provider read from its prompt cache and wrote to it, where it
	// reports them (OpenAI's cached_tokens; Anthropic's
	// cache_read_input_tokens and cache_creation_input_tokens).
	CacheReadTokens, CacheWriteTokens int
	// Encoding, when set, says OutputTokens is the exact tiktoken count of
	// Text in that encoding (a model's own usage figures are not).
	Encoding string
}

// Summarizer writes summaries. It returns an error wrapping
// ErrContextLength when the prompt is too long for the model; an error with
// a Retryable() bool method says whether a later retry may succeed
// (otherwise a failure is taken as retryable). It must be safe for
// concurrent use.
type Summarizer interface {
	Summarize(ctx context.Context, req SummaryRequest) (SummaryResponse, error)
}

// MessagesReader is implemented by a Summarizer that, for some requests,
// reads only SummaryRequest.Messages (with MaxTokens, Focus and Encoding)
// and never System or Prompt: the pipeline then does not render them,
// which on a long session costs more than the JetStream work.
type MessagesReader interface {
	ReadsMessagesOnly(req SummaryRequest) bool
}

// Rereader is implemented by a Summarizer for which summarising again
// everything a summary covers costs nothing worth saving (no model: the
// offline summariser). The pipeline then writes each summary from the
// original messages (up to maxReread of them) instead of merging a delta
// into the summary in force, so that nothing is lost to repeated merging.
type Rereader interface {
	RereadsAll(req SummaryRequest) bool
}

// Hedger is a Summarizer that hedges a request's call running long:
// HedgeAfter says after how long a call of req's model would get a second
// call beside it (false: never). A request waits no longer for a
// preparation in flight (whose calls are not hedged: no runtime waited
// when they started), then takes its own, hedged, path.
type Hedger interface {
	HedgeAfter(req SummaryRequest) (time.Duration, bool)
}
