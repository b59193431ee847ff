package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Config is the compaction configuration (CompactionConfig of the design
// note). Start from DefaultConfig and change fields; Validate before use.
type Config struct {
	// KeepRecentTurns is how many of the latest turns stay raw. A turn
	// starts at a user message and runs to the next one.
	KeepRecentTurns int `json:"keep_recent_turns"`
	// MaxSummaryTokens bounds every compaction message as a whole: its
	// preamble, working state, artifact ledger and the summariser's prose
	// share it (the ledger's sections shrink first, by their priority).
	// It is also the most max_tokens of a summary model call.
	MaxSummaryTokens int `json:"max_summary_tokens"`
	// MaxMessages triggers compaction when the context holds more messages.
	// Zero disables the message-count trigger.
	MaxMessages int `json:"max_messages"`
	// SummaryModel is the model that writes summaries; empty means the
	// session's own model.
	SummaryModel string `json:"summary_model,omitempty"`
	// SummaryProvider names the provider of SummaryModel; empty lets the
	// router decide.
	SummaryProvider string `json:"summary_provider,omitempty"`
	// SummaryContextLimit is the summary model's input limit in tokens; zero
	// takes it from the model table.
	SummaryContextLimit int `json:"summary_context_limit,omitempty"`
	// EnableIncremental summarises only the messages since the last
	// compaction and appends the delta to the existing summary.
	EnableIncremental bool `json:"enable_incremental"`
	// MaxFailures consecutive failed compactions open a session's breaker.
	MaxFailures int `json:"max_failures"`
	// BreakerCooldown lets one request through an open breaker per
	// cooldown (half-open): success closes it, failure keeps it open, so a
	// session recovers by itself after an outage. It is also the window in
	// which retryable failures (the model unavailable) count once: one
	// outage is one failure, however often runtimes retry through it.
	// Default 30 s; zero keeps an open breaker open until an operator
	// resets it (the design note's rule), and counts every failure.
	BreakerCooldown Duration `json:"breaker_cooldown"`
	// HeadroomRatio is the share of the context window that summary plus
	// raw tail aim for, as far as the pinned messages allow.
	HeadroomRatio float64 `json:"headroom_ratio"`
	// MinReduction is the share of the context's tokens a compaction must
	// remove; less counts as a failure, never a silent loop.
	MinReduction float64 `json:"min_reduction"`
	// CondenseRatio is the share of max_summary_tokens an incremental
	// summary is condensed to when it grows over the budget, so the next
	// deltas fit without another condensing call (1: condense to the
	// budget itself, and so again at almost every compaction).
	CondenseRatio float64 `json:"condense_ratio"`
	// LedgerShare is the share of a summary's budget its artifact ledger
	// (files, commands, errors and fixes, tests, identifiers, extracted
	// from the summarised messages) may take; 0 turns the ledger off.
	LedgerShare float64 `json:"ledger_share"`
	// ImageTokens is what an image whose size cannot be read (a remote
	// URL) counts; 0: 765, a 1024x1024 image in high detail. Images whose
	// data is inline count by OpenAI's rule (tokens.ImageTokens).
	ImageTokens int `json:"image_tokens,omitempty"`
	// KeepFirstUserMessage pins the first user message (the task) next to
	// the leading system messages.
	KeepFirstUserMessage bool `json:"keep_first_user_message"`
	// ToolOutputMaxTokens clamps each tool output in the summary prompt
	// (head and tail kept, a marker between).
	ToolOutputMaxTokens int `json:"tool_output_max_tokens"`
	// MaxChunkDepth bounds the levels of recursive chunk summarisation.
	MaxChunkDepth int `json:"max_chunk_depth"`
	// CommitRetries bounds how often a compaction that lost a commit race is
	// re-planned from a fresh read.
	CommitRetries int `json:"commit_retries"`
	// Timeout bounds one whole compaction; zero means only the caller's
	// context bounds it.
	Timeout Duration `json:"timeout,omitempty"`

	// Reductions is the ladder: the steps a compaction takes, in order,
	// each only while the context is still over its target after the
	// previous one (StepClear, StepSummarise). A compaction that clearing
	// alone brings under target calls no model.
	Reductions []string `json:"reductions"`
	// KeepToolResults is how many of the latest tool results are never
	// cleared, wherever they are.
	KeepToolResults int `json:"keep_tool_results"`
	// ClearMinTokens: a tool result of fewer tokens is not cleared (its
	// placeholder would save little).
	ClearMinTokens int `json:"clear_min_tokens"`
	// ClearAtLeast: tool results are cleared in batches of at least this
	// many tokens, or not at all. Clearing changes the context from the
	// first cleared message on, which costs the provider's cached prefix
	// from there: batches amortise that. A batch is never smaller than
	// the min_reduction share of the context (0: just that).
	ClearAtLeast int `json:"clear_at_least,omitempty"`
	// ExcludeTools names tools whose results are never cleared.
	ExcludeTools []string `json:"exclude_tools,omitempty"`
	// ClearToolInputs clears large tool-call arguments too (a file written
	// in full, a long patch), by the same rules.
	ClearToolInputs bool `json:"clear_tool_inputs"`

	// PrepareAt is the share of its limit at which a session's context
	// gets its next compaction prepared: computed ahead, stored, and
	// committed without a model call by the request that needs it (0:
	// never prepared).
	PrepareAt float64 `json:"prepare_at"`
	// PreparedMaxAge is how long a ready preparation may wait for its
	// request: an older one is prepared again, never applied (0: no
	// bound). What it summarised has not changed (history is append-only),
	// but a summary made long before the turn that needs it was made
	// without what the session learnt since.
	PreparedMaxAge Duration `json:"prepared_max_age,omitempty"`
}

// Steps of the reduction ladder.
const (
	// StepClear replaces old tool results (and, with ClearToolInputs,
	// large tool-call arguments) outside the raw tail by placeholders.
	StepClear = "clear_tool_results"
	// StepSummarise summarises the oldest messages into the summary.
	StepSummarise = "summarise"
)

// Duration is a time.Duration that reads and writes JSON as a string such
// as "90s" (a number is taken as seconds).
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "90s" or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return errors.New("a duration is a string such as \"90s\" or a number of seconds")
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// DefaultConfig returns the defaults of the design note and SPEC §3 and §9.
func DefaultConfig() Config {
	return Config{
		KeepRecentTurns:     4,
		MaxSummaryTokens:    1000,
		MaxMessages:         50,
		EnableIncremental:   true,
		MaxFailures:         3,
		BreakerCooldown:     Duration(DefaultBreakerCooldown),
		HeadroomRatio:       0.6,
		MinReduction:        0.10,
		CondenseRatio:       0.75,
		LedgerShare:         0.4,
		ToolOutputMaxTokens: 2000,
		MaxChunkDepth:       6,
		CommitRetries:       3,
		Reductions:          []string{StepClear, StepSummarise},
		KeepToolResults:     3,
		ClearMinTokens:      100,
		ClearAtLeast:        0,
		PrepareAt:           0.7,
		PreparedMaxAge:      Duration(30 * time.Minute),
	}
}

// DefaultBreakerCooldown is BreakerCooldown's default.
const DefaultBreakerCooldown = 30 * time.Second

// has reports whether the ladder has step.
func (c Config) has(step string) bool {
	for _, s := range c.Reductions {
		if s == step {
			return true
		}
	}
	return false
}

// promptReserve covers the summary instructions and framing in every call.
const promptReserve = 600

// MinSummaryContextLimit is the smallest summary-model input limit that can
// merge two summaries of maxSummaryTokens.
func MinSummaryContextLimit(maxSummaryTokens int) int { return 4*maxSummaryTokens + promptReserve }

// minSummaryTokens is the smallest summary budget that fits the template's
// headings with room for facts.
const minSummaryTokens = 100

// Validate reports every out-of-range field at once. It returns an error
// wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.KeepRecentTurns >= 0, "keep_recent_turns must be >= 0, got %d", c.KeepRecentTurns)
	check(c.MaxSummaryTokens >= minSummaryTokens+summaryFraming, "max_summary_tokens must be >= %d (a summary of %d and its message's framing), got %d",
		minSummaryTokens+summaryFraming, minSummaryTokens, c.MaxSummaryTokens)
	check(c.MaxMessages >= 0, "max_messages must be >= 0, got %d", c.MaxMessages)
	check(c.MaxMessages == 0 || c.MaxMessages > c.KeepRecentTurns, "max_messages (%d) must exceed keep_recent_turns (%d)", c.MaxMessages, c.KeepRecentTurns)
	check(c.SummaryContextLimit >= 0, "summary_context_limit must be >= 0, got %d", c.SummaryContextLimit)
	check(c.SummaryContextLimit == 0 || c.SummaryContextLimit >= MinSummaryContextLimit(c.MaxSummaryTokens),
		"summary_context_limit (%d) must be at least %d (4 x max_summary_tokens + %d for the instructions) so chunk summaries can be merged",
		c.SummaryContextLimit, MinSummaryContextLimit(c.MaxSummaryTokens), promptReserve)
	check(c.MaxFailures >= 1, "max_failures must be >= 1, got %d", c.MaxFailures)
	check(c.HeadroomRatio > 0 && c.HeadroomRatio <= 1, "headroom_ratio must be in (0, 1], got %g", c.HeadroomRatio)
	check(c.MinReduction >= 0 && c.MinReduction < 1, "min_reduction must be in [0, 1), got %g", c.MinReduction)
	check(c.ImageTokens >= 0, "image_tokens must be >= 0, got %d", c.ImageTokens)
	check(c.LedgerShare >= 0 && c.LedgerShare <= 0.8, "ledger_share must be in [0, 0.8], got %g", c.LedgerShare)
	check(c.CondenseRatio >= 0.2 && c.CondenseRatio <= 1, "condense_ratio must be in [0.2, 1], got %g", c.CondenseRatio)
	check(c.ToolOutputMaxTokens >= 50, "tool_output_max_tokens must be >= 50, got %d", c.ToolOutputMaxTokens)
	check(c.MaxChunkDepth >= 1 && c.MaxChunkDepth <= 16, "max_chunk_depth must be in [1, 16], got %d", c.MaxChunkDepth)
	check(c.CommitRetries >= 0, "commit_retries must be >= 0, got %d", c.CommitRetries)
	check(c.Timeout >= 0, "timeout must be >= 0, got %s", time.Duration(c.Timeout))
	check(c.BreakerCooldown >= 0, "breaker_cooldown must be >= 0, got %s", time.Duration(c.BreakerCooldown))
	check(len(c.Reductions) > 0, "reductions must name at least one step (%s, %s)", StepClear, StepSummarise)
	seen := map[string]bool{}
	for _, st := range c.Reductions {
		check(st == StepClear || st == StepSummarise, "reductions: unknown step %q (want %s or %s)", st, StepClear, StepSummarise)
		check(!seen[st], "reductions: step %q given twice", st)
		seen[st] = true
	}
	check(c.KeepToolResults >= 0, "keep_tool_results must be >= 0, got %d", c.KeepToolResults)
	check(c.ClearMinTokens >= 1, "clear_min_tokens must be >= 1, got %d", c.ClearMinTokens)
	check(c.ClearAtLeast >= 0, "clear_at_least must be >= 0, got %d", c.ClearAtLeast)
	check(c.PrepareAt == 0 || c.PrepareAt > 0 && c.PrepareAt < 1, "prepare_at must be 0 (off) or in (0, 1), got %g", c.PrepareAt)
	check(c.PreparedMaxAge >= 0, "prepared_max_age must be >= 0, got %s", time.Duration(c.PreparedMaxAge))
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}
