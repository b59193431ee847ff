package eval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"

	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// Report is one conversation replayed through the runtime loop.
type Report struct {
	Name        string  `json:"name"`
	Source      string  `json:"source"`
	Limit       int     `json:"context_limit"`
	Incremental bool    `json:"incremental"`
	Messages    int     `json:"messages"`
	Tokens      int     `json:"tokens"` // every message counted once: the floor of model input
	Compactions int     `json:"compactions"`
	Failures    int     `json:"failures"`     // failed compactions (circuit_open refusals aside)
	CircuitOpen bool    `json:"circuit_open"` // the breaker opened during the replay
	LLMCalls    int     `json:"llm_calls"`
	InputTokens int     `json:"summary_input_tokens"`
	FinalTokens int     `json:"final_context_tokens"`
	MaxTokens   int     `json:"max_context_tokens"` // the largest context the runtime sent
	TokensSaved int     `json:"tokens_saved"`       // Tokens - FinalTokens
	CostRatio   float64 `json:"input_over_floor"`   // InputTokens / Tokens
	// NoModel counts the compactions that called no model (the ladder's
	// clearing sufficed); PrefixKept sums their prefix_kept_tokens.
	NoModel    int `json:"compactions_without_model"`
	PrefixKept int `json:"prefix_kept_tokens"`
	// PinnedHead sums, over the compactions, the pinned head of the
	// context each left (the messages before its summary, or the leading
	// system messages and pinned task where none is), and HeadKept how
	// much of it each kept as the provider's cached prefix
	// (min(prefix_kept_tokens, head)).
	PinnedHead int        `json:"pinned_head_tokens"`
	HeadKept   int        `json:"pinned_head_kept_tokens"`
	Retention  *Retention `json:"retention,omitempty"`
	// TailStartSeq is where the final context's raw tail starts: every
	// message before it (but the pinned) is summarised.
	TailStartSeq int64 `json:"tail_start_seq,omitempty"`
}

// PinnedHead is the pinned head of a compacted context: the messages
// before its summary, or, where it has none, its leading system messages
// and (keepFirstUser) the user's first message after them, counted.
func PinnedHead(view []session.Message, keepFirstUser bool) int {
	n, i := 0, 0
	if j := slices.IndexFunc(view, func(m session.Message) bool { return m.IsCompaction }); j >= 0 {
		for _, m := range view[:j] {
			n += m.Tokens
		}
		return n
	}
	for ; i < len(view) && view[i].Role == session.RoleSystem; i++ {
		n += view[i].Tokens
	}
	if keepFirstUser && i < len(view) && view[i].Role == session.RoleUser {
		n += view[i].Tokens
	}
	return n
}

// Loop is what a replay drives: a session store and a compactor, in
// process (MemoryLoop) or over NATS through the service.
type Loop interface {
	// Create stores an empty session with the context limit.
	Create(ctx context.Context, id string, limit int) error
	// Append adds m at the head and returns the tokens it adds to the
	// context, as the store counts them.
	Append(ctx context.Context, id string, m session.Message) (int, error)
	// View is what the model would see now.
	View(ctx context.Context, id string) ([]session.Message, error)
	// Compact asks for a compaction and returns its result (Failed set
	// for a failure, with the error).
	Compact(ctx context.Context, id, requestID string) (*pipeline.Result, error)
	// History is every message of the session, summarised ones marked.
	History(ctx context.Context, id string) ([]session.Message, error)
	// TailStart is the seq of the first message the model sees raw.
	TailStart(ctx context.Context, id string) (int64, error)
}

// MemoryLoop runs the pipeline in process on the memory store.
type MemoryLoop struct {
	store *memstore.Store
	svc   *pipeline.Service
	// prepared: every append is told to the service's preparation, as
	// the preparer is (done at once, as if the model were instant), so
	// requests are answered from preparations where one holds.
	prepared bool
	// Preparations counts the preparations made and FromPreparation the
	// compactions committed from one.
	Preparations, FromPreparation int
	// Focus is the focus text every request carries ("": none).
	Focus string
}

// NewPreparingMemoryLoop is NewMemoryLoop with preparations: each append
// past cfg.PrepareAt prepares the session's next compaction, which the
// request at the limit commits (the prepared path, for eval probes
// --prepared).
func NewPreparingMemoryLoop(sum pipeline.Summarizer, cfg pipeline.Config) (*MemoryLoop, error) {
	if cfg.PrepareAt <= 0 {
		return nil, errors.New("eval: a preparing loop needs prepare_at")
	}
	l, err := NewMemoryLoop(sum, cfg)
	if err != nil {
		return nil, err
	}
	l.prepared = true
	return l, nil
}

// NewMemoryLoop returns a Loop compacting with sum under cfg.
func NewMemoryLoop(sum pipeline.Summarizer, cfg pipeline.Config) (*MemoryLoop, error) {
	store := memstore.New()
	svc, err := pipeline.New(store, memstore.NewBreakers(), sum, cfg)
	if err != nil {
		return nil, err
	}
	return &MemoryLoop{store: store, svc: svc}, nil
}

func (l *MemoryLoop) Create(ctx context.Context, id string, limit int) error {
	_, err := l.store.Create(ctx, session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: limit}, nil)
	return err
}

func (l *MemoryLoop) Append(ctx context.Context, id string, m session.Message) (int, error) {
	added, err := l.store.Append(ctx, id, m)
	if err != nil || len(added) != 1 {
		return 0, err
	}
	if l.prepared {
		out, err := l.svc.Prepare(ctx, pipeline.PrepareRequest{SessionID: id, Trigger: pipeline.PrepareAppend})
		if err != nil {
			return 0, err
		}
		if out.Outcome == pipeline.PrepareDone {
			l.Preparations++
		}
	}
	return added[0].Tokens, nil
}

func (l *MemoryLoop) View(ctx context.Context, id string) ([]session.Message, error) {
	s, err := l.store.Load(ctx, id, false)
	if err != nil {
		return nil, err
	}
	return pipeline.ContextOf(s), nil
}

func (l *MemoryLoop) Compact(ctx context.Context, id, requestID string) (*pipeline.Result, error) {
	res, err := l.svc.Compact(ctx, pipeline.Request{ID: requestID, SessionID: id, Trigger: pipeline.TriggerOverBudget, Focus: l.Focus})
	if err == nil && strings.HasPrefix(res.Strategy, "prepared") {
		l.FromPreparation++
	}
	return res, err
}

func (l *MemoryLoop) History(ctx context.Context, id string) ([]session.Message, error) {
	all, _, err := l.store.History(ctx, id)
	return all, err
}

func (l *MemoryLoop) TailStart(ctx context.Context, id string) (int64, error) {
	rec, err := l.store.Record(ctx, id)
	return rec.TailStartSeq, err
}

// Replay runs the runtime loop a compactor serves, in process: see
// ReplayOn.
func Replay(ctx context.Context, c transcript.Conversation, counter *tokens.Counter, sum pipeline.Summarizer, cfg pipeline.Config, limit int) (Report, error) {
	loop, err := NewMemoryLoop(sum, cfg)
	if err != nil {
		return Report{}, err
	}
	return ReplayOn(ctx, loop, c, counter, cfg, limit)
}

// ReplayOn runs the runtime loop on loop: messages arrive one by one;
// whenever the context the runtime would send is over limit (or over
// cfg.MaxMessages), it asks for a compaction; after every compaction the
// context's invariants are checked. It returns an error for a broken
// invariant, never for a failed compaction (counted in the report).
func ReplayOn(ctx context.Context, loop Loop, c transcript.Conversation, counter *tokens.Counter, cfg pipeline.Config, limit int) (Report, error) {
	return replay(ctx, loop, c, counter, cfg, limit, nil)
}

// replay is ReplayOn that calls after (when not nil) after every
// compaction, with the context it left and the seq of its first raw
// message.
func replay(ctx context.Context, loop Loop, c transcript.Conversation, counter *tokens.Counter, cfg pipeline.Config, limit int,
	after func(view []session.Message, tail int64, res *pipeline.Result) error) (Report, error) {
	r := &replayer{ctx: ctx, loop: loop, c: c, counter: counter, cfg: cfg, limit: limit, after: after, id: replayID(c.Name),
		rep: Report{Name: c.Name, Source: c.Source, Limit: limit, Incremental: cfg.EnableIncremental, Messages: len(c.Messages)}}
	rep := &r.rep
	msgs := make([]session.Message, len(c.Messages))
	copy(msgs, c.Messages)
	for i := range msgs {
		rep.Tokens += counter.Ensure(&msgs[i])
	}
	if err := loop.Create(ctx, r.id, limit); err != nil {
		return *rep, err
	}
	// The context is read after each compaction; between them a runtime
	// knows what it appended (reading the whole view after every append
	// made the replay through the service quadratic before a first
	// compaction).
	view, n, err := r.context()
	if err != nil {
		return *rep, err
	}
	for i := range msgs {
		added, err := loop.Append(ctx, r.id, msgs[i])
		if err != nil {
			return *rep, err
		}
		n += added
		view = append(view, msgs[i])
		if n <= limit && (cfg.MaxMessages == 0 || len(view) <= cfg.MaxMessages) {
			rep.MaxTokens = max(rep.MaxTokens, n)
			continue
		}
		res, err := loop.Compact(ctx, r.id, fmt.Sprintf("%s-%d", r.id, i))
		if res != nil {
			rep.LLMCalls += res.LLMCalls
			rep.InputTokens += res.InputTokens
		}
		switch {
		case errors.Is(err, pipeline.ErrInvariant):
			return *rep, fmt.Errorf("%s message %d: %w", c.Name, i, err)
		case errors.Is(err, pipeline.ErrCircuitOpen):
			rep.CircuitOpen = true
		case err != nil:
			rep.Failures++
		case res.Outcome == pipeline.OutcomeCompacted:
			if view, n, err = r.compacted(i, res); err != nil {
				return *rep, err
			}
		}
		// n is the context the runtime sends next: compacted, or as it was
		// when the compaction did not happen.
		rep.MaxTokens = max(rep.MaxTokens, n)
	}
	err = r.finish()
	return *rep, err
}

// replayer is one conversation's replay.
type replayer struct {
	ctx     context.Context
	loop    Loop
	id      string
	c       transcript.Conversation
	counter *tokens.Counter
	cfg     pipeline.Config
	limit   int
	after   func(view []session.Message, tail int64, res *pipeline.Result) error
	rep     Report
}

// context reads what the model sees, and its tokens.
func (r *replayer) context() ([]session.Message, int, error) {
	view, err := r.loop.View(r.ctx, r.id)
	if err != nil {
		return nil, 0, err
	}
	return view, r.counter.Context(view), nil
}

// compacted counts compaction res (after message i) and reads the context
// it left, checked against the history and the limit (and by after).
func (r *replayer) compacted(i int, res *pipeline.Result) ([]session.Message, int, error) {
	rep := &r.rep
	rep.Compactions++
	rep.PrefixKept += res.PrefixKeptTokens
	if res.LLMCalls == 0 {
		rep.NoModel++
	}
	all, err := r.loop.History(r.ctx, r.id)
	if err != nil {
		return nil, 0, err
	}
	view, n, err := r.context()
	if err != nil {
		return nil, 0, err
	}
	if head := PinnedHead(view, r.cfg.KeepFirstUserMessage); head > 0 {
		rep.PinnedHead += head
		rep.HeadKept += min(res.PrefixKeptTokens, head)
	}
	if err := CheckContext(all, view, n, r.limit, r.counter, r.cfg.MaxSummaryTokens); err != nil {
		return nil, 0, fmt.Errorf("%s after message %d: %w", r.c.Name, i, err)
	}
	if r.after != nil {
		tail, err := r.loop.TailStart(r.ctx, r.id)
		if err != nil {
			return nil, 0, err
		}
		if err := r.after(view, tail, res); err != nil {
			return nil, 0, err
		}
	}
	return view, n, nil
}

// finish reads the final context: the tokens saved, the model's cost, and
// the LoCoMo answers it retains.
func (r *replayer) finish() error {
	rep := &r.rep
	final, n, err := r.context()
	if err != nil {
		return err
	}
	rep.FinalTokens = n
	rep.TokensSaved = rep.Tokens - rep.FinalTokens
	if rep.Tokens > 0 {
		rep.CostRatio = float64(rep.InputTokens) / float64(rep.Tokens)
	}
	tail, err := r.loop.TailStart(r.ctx, r.id)
	if err != nil {
		return err
	}
	rep.TailStartSeq = tail
	if len(r.c.QA) > 0 {
		m := Measure(r.c, func(i int) bool { return int64(i+1) < tail }, ContextUnits(final))
		rep.Retention = &m
	}
	return nil
}

// replayID is a session id for a conversation name (letters, digits, '-'
// and '_' only) that no other replay uses.
func replayID(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 120 {
		s = s[:120]
	}
	return "replay-" + s + "-" + strconv.FormatUint(replaySeq.Add(1), 10)
}

var replaySeq atomic.Uint64

// CheckContext checks a compacted context against the session's full
// history: the leading system messages first, every tool result with its
// call before it and every call with all its results, the summary within
// its budget, the context within the limit.
func CheckContext(all, view []session.Message, viewTokens, limit int, counter *tokens.Counter, maxSummary int) error {
	for i := 0; i < len(all) && all[i].Role == session.RoleSystem; i++ {
		if i >= len(view) || view[i].ID != all[i].ID {
			return fmt.Errorf("pinned system message %d is not in place", i)
		}
	}
	owner, want := pipeline.ToolPairs(all)
	inView := map[string]bool{}
	for _, m := range view {
		inView[m.ID] = true
	}
	got := map[pipeline.ToolCall]int{}
	for _, m := range view {
		if m.IsCompaction {
			if n := counter.Message(&m); n > maxSummary {
				return fmt.Errorf("compaction message of %d tokens, over max_summary_tokens %d", n, maxSummary)
			}
			continue
		}
		if c, ok := owner[m.ID]; ok {
			if !inView[c.MessageID] {
				return fmt.Errorf("tool result %s without its call", m.ToolCallID)
			}
			got[c]++
		}
	}
	for _, m := range view {
		for _, tc := range m.ToolCalls {
			c := pipeline.ToolCall{MessageID: m.ID, CallID: tc.ID}
			if got[c] != want[c] {
				return fmt.Errorf("tool call %s with %d of its %d results", tc.ID, got[c], want[c])
			}
		}
	}
	if viewTokens > limit {
		return fmt.Errorf("context of %d tokens, over the limit %d", viewTokens, limit)
	}
	return nil
}
