package pipeline

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/summary"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/tokens"
)

// renderOverhead estimates the tokens renderMessage adds around a message's
// own count (tags, seq, role).
const renderOverhead = 16

// promptOverhead covers the framing text around the transcript.
const promptOverhead = 160

// maxShrinks bounds how often a context-length error from the summary model
// halves the chunk budget within one compaction.
const maxShrinks = 6

var sysTokens sync.Map // encoding name -> tokens of systemPrompt

// systemPromptTokens counts the fixed instruction once per encoding.
func systemPromptTokens(c *tokens.Counter) int {
	if n, ok := sysTokens.Load(c.Encoding()); ok {
		return n.(int)
	}
	n := c.Count(systemPrompt)
	sysTokens.Store(c.Encoding(), n)
	return n
}

// summariser runs the summarise stage for one compaction: it chunks input
// that is over the summary model's limit at message boundaries (splitting a
// single giant message by tokens), summarises each chunk, then merges the
// chunk summaries, recursively and boundedly, until one summary within
// maxTokens remains. It is used by one goroutine.
type summariser struct {
	sum        Summarizer
	quota      ModelBudget // nil: none
	counter    *tokens.Counter
	model      string
	provider   string
	maxTokens  int
	inputLimit int
	focus      string
	maxDepth   int
	budget     int // content tokens per call
	sysTokens  int // the system prompt's tokens

	calls, chunks, shrinks int
	inTokens, outTokens    int

	// sources are what "User instructions" may quote; dropped counts the
	// bullets removed for quoting nothing the user wrote.
	sources sources
	dropped int

	memo         map[string]int // token counts of summary texts seen in this compaction
	answeredBy   string         // the model the provider says answered
	messagesOnly bool           // the summariser does not read rendered prompts
}

// remember records a summary text's exact count.
func (s *summariser) remember(text string, n int) {
	if s.memo == nil {
		s.memo = map[string]int{}
	}
	s.memo[text] = n
}

// count counts a summary text, once per compaction: the same summary is
// measured for the usage figures, the budget check and the result.
func (s *summariser) count(text string) int {
	if n, ok := s.memo[text]; ok {
		return n
	}
	n := s.counter.Count(text)
	s.remember(text, n)
	return n
}

func newSummariser(sum Summarizer, counter *tokens.Counter, model, provider string, maxTokens, inputLimit, maxDepth int, focus string) (*summariser, error) {
	s := &summariser{sum: sum, counter: counter, model: model, provider: provider, maxTokens: maxTokens,
		inputLimit: inputLimit, maxDepth: maxDepth, focus: focus}
	if mr, ok := sum.(MessagesReader); ok {
		s.messagesOnly = mr.ReadsMessagesOnly(SummaryRequest{Model: model, Provider: provider, Encoding: counter.Encoding()})
	}
	s.sysTokens = systemPromptTokens(counter)
	s.budget = inputLimit - maxTokens - s.sysTokens - promptOverhead
	if s.budget < 2*(maxTokens+renderOverhead) {
		return nil, fmt.Errorf("%w: the summary model's input limit (%d tokens) leaves %d tokens per call, too few to merge two summaries of %d",
			ErrInvalidConfig, inputLimit, s.budget, maxTokens)
	}
	return s, nil
}

// runWithin summarises msgs into one summary of at most maxTokens (at
// most the summariser's budget).
func (s *summariser) runWithin(ctx context.Context, msgs []session.Message, maxTokens int) (string, error) {
	return s.within(maxTokens, func() (string, error) { return s.run(ctx, msgs) })
}

// run summarises msgs into one summary.
func (s *summariser) run(ctx context.Context, msgs []session.Message) (string, error) {
	for i := range msgs {
		// Stored messages may come uncounted (appends are not counted on
		// their path): packing and estimates need every count.
		s.counter.Ensure(&msgs[i])
	}
	chunks := s.pack(msgs, s.budget)
	s.chunks = len(chunks)
	if len(chunks) == 1 {
		return s.summariseChunk(ctx, chunks[0])
	}
	return s.summariseAll(ctx, chunks)
}

// summariseAll summarises consecutive chunks and merges their summaries.
func (s *summariser) summariseAll(ctx context.Context, chunks [][]session.Message) (string, error) {
	parts := make([]string, 0, len(chunks))
	for _, c := range chunks {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		p, err := s.summariseChunk(ctx, c)
		if err != nil {
			return "", err
		}
		parts = append(parts, p)
	}
	return s.reduce(ctx, parts)
}

// pack groups msgs into chunks of at most budget estimated tokens, at message
// boundaries. A message over the budget on its own is split into pieces.
func (s *summariser) pack(msgs []session.Message, budget int) [][]session.Message {
	var chunks [][]session.Message
	var cur []session.Message
	curTokens := 0
	flush := func() {
		if len(cur) > 0 {
			chunks = append(chunks, cur)
			cur, curTokens = nil, 0
		}
	}
	for i := range msgs {
		m := msgs[i]
		est := m.Tokens + renderOverhead
		if est > budget {
			flush()
			for _, piece := range s.splitMessage(m, budget-renderOverhead) {
				chunks = append(chunks, []session.Message{piece})
			}
			continue
		}
		if curTokens+est > budget {
			flush()
		}
		cur = append(cur, m)
		curTokens += est
	}
	flush()
	return chunks
}

// splitMessage cuts a message that alone exceeds budget into pieces of at
// most budget tokens, each a copy of the message with part of its text.
// Oversized tool-call arguments are truncated with a marker.
func (s *summariser) splitMessage(m session.Message, budget int) []session.Message {
	if len(m.ToolCalls) > 0 {
		calls := make([]session.ToolCall, len(m.ToolCalls))
		copy(calls, m.ToolCalls)
		per := max(budget/(2*len(calls)), 16)
		for i := range calls {
			if args := calls[i].Function.Arguments; s.counter.Count(args) > per {
				calls[i].Function.Arguments = s.counter.Truncate(args, per) + " [... arguments truncated ...]"
			}
		}
		m.ToolCalls = calls
	}
	m.Tokens = 0
	if s.counter.Message(&m) <= budget {
		m.Tokens = s.counter.Message(&m)
		return []session.Message{m}
	}
	callTokens := s.counter.Message(&session.Message{Role: m.Role, ToolCalls: m.ToolCalls})
	pieces := s.counter.Split(m.Content.Text, max(budget-callTokens, budget/2))
	out := make([]session.Message, 0, len(pieces))
	for i, p := range pieces {
		piece := m
		piece.Content = session.TextContent(p)
		if i > 0 {
			piece.ToolCalls = nil // the calls go with the first piece only
		}
		if strings.TrimSpace(p) == "" && len(piece.ToolCalls) == 0 && (len(out) > 0 || i < len(pieces)-1) {
			continue // a run of blank lines: nothing to summarise, and a chunk of it alone has no summary
		}
		piece.Tokens = s.counter.Message(&piece)
		out = append(out, piece)
	}
	return out
}

// summariseChunk summarises one chunk. A chunk over the current budget is
// re-packed first. When the model says the prompt is too long, the budget
// shrinks (to what the provider's reported limit allows, else to half the
// chunk) for the rest of the compaction, and the chunk is re-packed: the
// same input is never sent twice.
func (s *summariser) summariseChunk(ctx context.Context, chunk []session.Message) (string, error) {
	est := estimateTokens(chunk)
	if est > s.budget && len(chunk) > 0 {
		sub := s.pack(chunk, s.budget)
		if len(sub) > 1 || estimateTokens(sub[0]) < est {
			s.chunks += len(sub) - 1
			return s.summariseAll(ctx, sub)
		}
	}
	var p Prompt
	if !s.messagesOnly {
		p = BuildPrompt(chunk, s.maxTokens, s.focus)
	}
	text, err := s.call(ctx, TaskSummarise, p, chunk, est)
	if !errors.Is(err, ErrContextLength) {
		return text, err
	}
	if err := s.shrink(err, est); err != nil {
		return "", err
	}
	return s.summariseChunk(ctx, chunk)
}

// shrink lowers the per-call budget after a context-length error on an
// input of est tokens. It fails when the shrinks are spent or the budget
// would be too small to merge two summaries.
func (s *summariser) shrink(cause error, est int) error {
	next := min(s.budget, est) / 2
	var cle *ContextLengthError
	if errors.As(cause, &cle) && cle.Limit > 0 {
		if fromLimit := cle.Limit - s.maxTokens - s.sysTokens - promptOverhead; fromLimit > 0 && fromLimit < min(s.budget, est) {
			next = max(next, fromLimit*9/10)
		}
	}
	s.shrinks++
	if s.shrinks > maxShrinks || next < 2*(s.maxTokens+renderOverhead) {
		return fail(ReasonSummaryFailed, false, ErrSummaryFailed,
			"the summary model rejected %d tokens as too long, and a budget of %d tokens per call cannot merge summaries of %d (%d shrinks): %v",
			est, next, s.maxTokens, s.shrinks, cause)
	}
	s.budget = next
	return nil
}

func estimateTokens(msgs []session.Message) int {
	n := 0
	for i := range msgs {
		n += msgs[i].Tokens + renderOverhead
	}
	return n
}

// reduce merges partial summaries, oldest first, group by group, until one
// remains. Each level at least halves the count (a group holds two or more
// summaries), and the depth is bounded.
func (s *summariser) reduce(ctx context.Context, parts []string) (string, error) {
	for depth := 1; len(parts) > 1; depth++ {
		if depth > s.maxDepth+maxShrinks {
			return "", fail(ReasonSummaryFailed, false, ErrSummaryFailed, "%d partial summaries left after %d merge levels", len(parts), depth-1)
		}
		groups := s.group(parts, s.budget)
		next := make([]string, 0, len(groups))
		for gi, g := range groups {
			if err := ctx.Err(); err != nil {
				return "", err
			}
			if len(g) == 1 {
				next = append(next, g[0])
				continue
			}
			merged, err := s.merge(ctx, TaskMerge, g)
			if errors.Is(err, ErrContextLength) {
				// Too long for the model after all: regroup the rest of this
				// level with the smaller budget.
				est := 0
				for _, p := range g {
					est += s.count(p) + renderOverhead
				}
				if serr := s.shrink(err, est); serr != nil {
					return "", serr
				}
				next = append(next, flatten(groups[gi:])...)
				break
			}
			if err != nil {
				return "", err
			}
			next = append(next, merged)
		}
		parts = next
	}
	return parts[0], nil
}

func flatten(groups [][]string) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// group packs consecutive summaries into groups within budget. Every group
// but the last holds at least two, so each level about halves the count; the
// budget (at least two summaries' worth, see newSummariser and shrink) keeps
// every group of two within the model's limit.
func (s *summariser) group(parts []string, budget int) [][]string {
	var groups [][]string
	var cur []string
	curTokens := 0
	for _, p := range parts {
		t := s.count(p) + renderOverhead
		if len(cur) >= 2 && curTokens+t > budget {
			groups = append(groups, cur)
			cur, curTokens = nil, 0
		}
		cur = append(cur, p)
		curTokens += t
	}
	if len(cur) > 0 { // a lone leftover waits for the next level
		groups = append(groups, cur)
	}
	return groups
}

// merge asks for one summary of several (TaskMerge) or a shorter one
// (TaskCondense).
func (s *summariser) merge(ctx context.Context, task Task, parts []string) (string, error) {
	var p Prompt
	if !s.messagesOnly {
		p = BuildMergePrompt(task, parts, s.maxTokens, s.focus)
	}
	msgs := make([]session.Message, len(parts))
	est := 0
	for i, part := range parts {
		msgs[i] = session.Message{Role: session.RoleAssistant, Content: session.TextContent(part), IsCompaction: true}
		est += s.count(part) + renderOverhead
	}
	return s.call(ctx, task, p, msgs, est)
}

// within runs f with the answer budget lowered to target tokens (when it
// is below the budget).
func (s *summariser) within(target int, f func() (string, error)) (string, error) {
	if target > 0 && target < s.maxTokens {
		full := s.maxTokens
		s.maxTokens = target
		defer func() { s.maxTokens = full }()
	}
	return f()
}

// condense shortens a summary that grew over the budget to target tokens
// (at most the budget).
func (s *summariser) condense(ctx context.Context, text string, target int) (string, error) {
	out, err := s.within(target, func() (string, error) { return s.merge(ctx, TaskCondense, []string{text}) })
	if errors.Is(err, ErrContextLength) {
		return "", fail(ReasonSummaryFailed, false, ErrSummaryFailed, "summary model rejected condensing a summary as too long: %v", err)
	}
	return out, err
}

// call makes one summary call, checks the answer, retries once with a
// reminder when it is not a summary, and fits it within maxTokens.
func (s *summariser) call(ctx context.Context, task Task, p Prompt, msgs []session.Message, estInput int) (string, error) {
	req := SummaryRequest{Model: s.model, Provider: s.provider, Task: task, System: p.System, Prompt: p.User,
		Messages: msgs, MaxTokens: s.maxTokens, Focus: s.focus, Encoding: s.counter.Encoding()}
	var lastErr error
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 {
			req.Prompt = p.User + reminder(lastErr)
			if errors.Is(lastErr, errInventedInstructions) {
				req.Prompt = p.User + instructionReminder + strings.Join(summary.Headings, ", ") + "."
			}
		}
		if s.quota != nil {
			if err := s.quota.Take(ctx); err != nil {
				var qe *tenant.QuotaError
				if errors.As(err, &qe) {
					return "", &Error{Reason: ReasonQuotaExceeded, Err: err}
				}
				return "", &Error{Reason: ReasonPersistFailed, Retryable: true, Err: fmt.Errorf("%w: count the model call against the tenant's quota: %w", ErrPersistFailed, err)}
			}
		}
		resp, err := s.sum.Summarize(ctx, req)
		s.calls++
		if err != nil {
			if errors.Is(err, ErrContextLength) || ctx.Err() != nil {
				return "", err
			}
			var pe *Error
			if errors.As(err, &pe) {
				return "", err
			}
			// A provider error says whether retrying can help (auth cannot).
			retryable := true
			var r interface{ Retryable() bool }
			if errors.As(err, &r) {
				retryable = r.Retryable()
			}
			return "", &Error{Reason: ReasonSummaryFailed, Retryable: retryable, Err: fmt.Errorf("%w: %w", ErrSummaryFailed, err)}
		}
		if resp.Model != "" {
			s.answeredBy = resp.Model
		}
		in, out := resp.InputTokens, resp.OutputTokens
		if in <= 0 {
			in = estInput + s.sysTokens + promptOverhead
		}
		text := strings.TrimSpace(resp.Text)
		if resp.Encoding == s.counter.Encoding() && resp.OutputTokens > 0 && text == resp.Text {
			s.remember(text, resp.OutputTokens) // counted exactly by the summariser
		}
		if out <= 0 {
			out = s.count(text)
		}
		s.inTokens += in
		s.outTokens += out
		if s.quota != nil {
			s.quota.Used(ctx, in+out)
		}
		if err := summary.Validate(text); err != nil {
			lastErr = err
			continue
		}
		verified, dropped, empty := verifyInstructions(text, s.sources)
		s.dropped += dropped
		if dropped > 0 && empty && attempt == 0 {
			lastErr = errInventedInstructions // one reminder, then an empty section is the answer
			continue
		}
		return s.fit(verified), nil
	}
	return "", fail(ReasonSummaryFailed, true, ErrSummaryFailed, "the summary model's answer is not a summary, after one reminder: %v", lastErr)
}

// fit is fitSummary with the compaction's memo.
func (s *summariser) fit(text string) string {
	if s.count(text) <= s.maxTokens {
		return text
	}
	return fitSummary(s.counter, text, s.maxTokens)
}

// fitSummary returns text in template form within maxTokens: when it is
// over, it drops the oldest bullets of the largest sections (user
// instructions and the goal last) until it fits. Each bullet is counted once.
func fitSummary(counter *tokens.Counter, text string, maxTokens int) string {
	return fitSummaryKeeping(counter, text, maxTokens, nil)
}

// fitSummaryKeeping is fitSummary that drops the bullets in keep (the
// ledger's) only when nothing else is left.
func fitSummaryKeeping(counter *tokens.Counter, text string, maxTokens int, keep []string) string {
	if counter.Count(text) <= maxTokens {
		return text
	}
	s, _ := summary.Parse(text)
	kept := make(map[string]bool, len(keep))
	for _, b := range keep {
		kept[strings.TrimSpace(strings.ReplaceAll(b, "\n", " "))] = true
	}
	total := counter.Count(summary.New().Render())
	for _, h := range summary.All {
		for _, b := range s.Sections[h] {
			total += counter.Count("- "+b+"\n") + 1
		}
	}
	for total > maxTokens {
		b := dropOldest(s, kept)
		if b == "" {
			break
		}
		total -= counter.Count("- "+b+"\n") + 1
	}
	out := s.Render()
	for counter.Count(out) > maxTokens && dropOldest(s, kept) != "" { // the estimate was low
		out = s.Render()
	}
	return out
}

// dropOldest removes the first bullet of the section with the most
// bullets: bullets in keep, the goal and the user's instructions only when
// nothing else is left. It returns the bullet, or "" when the summary has
// no bullets.
func dropOldest(s *summary.Summary, keep map[string]bool) string {
	protected := map[string]bool{summary.State: true, summary.Goal: true, summary.Instructions: true}
	for pass := 0; pass < 3; pass++ {
		victim, at, most := "", -1, 0
		for _, h := range summary.All {
			if protected[h] && pass < 2 {
				continue
			}
			n, first := 0, -1
			for i, b := range s.Sections[h] {
				if keep[b] && pass == 0 {
					continue
				}
				if first < 0 {
					first = i
				}
				n++
			}
			if n > most {
				victim, at, most = h, first, n
			}
		}
		if victim != "" {
			b := s.Sections[victim][at]
			s.Sections[victim] = append(s.Sections[victim][:at:at], s.Sections[victim][at+1:]...)
			return b
		}
	}
	return ""
}
