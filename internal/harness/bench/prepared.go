package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/router"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
	"github.com/compactor/compactor/internal/wire"
)

// PreparedOptions set up a comparison of blocking and prepared
// compactions (ComparePrepared).
type PreparedOptions struct {
	// Limit is every session's context limit (default 4000).
	Limit int
	// ModelDelay is how long every summary call takes (default 2 s).
	ModelDelay time.Duration
	// Pace scales the realistic pacing of the messages (default 0.25:
	// four times faster, which leaves preparations less time than real
	// agents would: a conservative figure). See PaceOf.
	Pace float64
	// Progress, when set, gets a line per mode.
	Progress io.Writer
	// Together runs the two modes at the same time, each with its own
	// server, service and stand-in model: half the time, where the
	// replays are long and the machine idles (a replay mostly waits on
	// its pace), at the cost of sharing the CPU between them.
	Together bool
	// Shape varies the conversations and their pace (zero: as recorded).
	Shape Shape
	// Trace, when set, gets a JSON line per request (TraceLine): what
	// each compaction did, to tell why one mode spent more than the other;
	// and one per preparation that ran (PrepTraceLine).
	Trace io.Writer
}

// PrepTraceLine is one preparation of a paced replay, as
// PreparedOptions.Trace writes it.
type PrepTraceLine struct {
	Mode    string `json:"mode"`
	Kind    string `json:"kind"` // "preparation"
	Session string `json:"session"`
	// AtMS is when it ended, from the replay's start.
	AtMS         int64  `json:"at_ms"`
	Outcome      string `json:"outcome"`
	Detail       string `json:"detail,omitempty"`
	TokensBefore int    `json:"tokens_before"`
	TokensAfter  int    `json:"tokens_after"`
	LLMCalls     int    `json:"llm_calls"`
	InputTokens  int    `json:"summary_input_tokens"`
	WastedTokens int    `json:"wasted_tokens,omitempty"`
	DurationMS   int64  `json:"duration_ms"`
	// Cause is why the preparer queued it, QueuedMS how long it waited
	// to start (pipeline.Preparation).
	Cause       string `json:"cause,omitempty"`
	CauseDetail string `json:"cause_detail,omitempty"`
	QueuedMS    int64  `json:"queued_ms,omitempty"`
	Error       string `json:"error,omitempty"`
}

// TraceLine is one request of a paced replay, as PreparedOptions.Trace
// writes it.
type TraceLine struct {
	Mode     string `json:"mode"`
	Session  string `json:"session"`
	Message  int    `json:"message"`
	Possible bool   `json:"possible"`
	WaitMS   int64  `json:"wait_ms"`
	Strategy string `json:"strategy,omitempty"`
	Failed   bool   `json:"failed,omitempty"`
	// Error is a failed request's reason and message.
	Error string `json:"error,omitempty"`
	// TokensBefore and TokensAfter are the context's, MessagesSummarised
	// and SummaryInputTokens the compaction's (0 for one committed from a
	// preparation: its preparation spent them).
	TokensBefore       int   `json:"tokens_before"`
	TokensAfter        int   `json:"tokens_after"`
	MessagesSummarised int   `json:"messages_summarised"`
	LLMCalls           int   `json:"llm_calls"`
	SummaryInputTokens int   `json:"summary_input_tokens"`
	PreparedAgeMS      int64 `json:"prepared_age_ms,omitempty"`
	// SummaryTokens is the summary's size in the context it left (a
	// committed preparation's too): a preparation that writes a larger
	// summary leaves more, and the session compacts sooner.
	SummaryTokens int `json:"summary_tokens"`
}

func (o *PreparedOptions) defaults() {
	if o.Limit <= 0 {
		o.Limit = 4000
	}
	if o.ModelDelay <= 0 {
		o.ModelDelay = 2 * time.Second
	}
	if o.Pace <= 0 {
		o.Pace = 0.25
	}
	if o.Trace == nil {
		o.Trace = io.Discard
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// PaceOf is how long after the previous message a message of this role
// and tokens arrives in a real agent loop: an assistant message as a
// model writes it (0.5 s to the first token, then 100 tokens a second), a
// tool result as a tool runs (0.3 s, plus reading its output at 5,000
// tokens a second), a user message 0.5 s plus 100 tokens a second (a
// person, or an orchestrator agent, writing it); at most 20 s. The count
// is an argument, not the message's Tokens, which a replay clears before
// it appends: reading that field, the replays paced every assistant
// message at 0.5 s whatever its length (from issue 24 until session 19).
func PaceOf(role session.Role, tokens int) time.Duration {
	secs := 0.5 + float64(tokens)/100
	if role == session.RoleTool {
		secs = 0.3 + float64(tokens)/5000
	}
	return time.Duration(math.Min(secs, 20) * float64(time.Second))
}

// Quantiles are latencies in milliseconds.
type Quantiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func quantiles(d []time.Duration) Quantiles {
	if len(d) == 0 {
		return Quantiles{}
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := int(math.Ceil(q*float64(len(d)))) - 1
		return float64(d[max(min(i, len(d)-1), 0)]) / float64(time.Millisecond)
	}
	return Quantiles{N: len(d), P50: at(0.50), P95: at(0.95), P99: at(0.99), Max: at(1)}
}

// PreparedRow is one mode's replay: every conversation at once, each
// paced, through the service, with a stand-in model.
type PreparedRow struct {
	Mode     string `json:"mode"` // blocking (prepare_at 0) or prepared
	Limit    int    `json:"context_limit"`
	Sessions int    `json:"sessions"`
	Requests int    `json:"requests"`
	// Compacted requests; of them, answered from a preparation at once
	// (strategy prepared), with a top-up, and with no model call at all.
	Compacted       int `json:"compacted"`
	FromPreparation int `json:"from_preparation"`
	TopUps          int `json:"topped_up"`
	NoModelCall     int `json:"no_model_call"`
	Failures        int `json:"failures"`
	// Possible are the requests that needed a model (one was called, or
	// a preparation's summary was committed; a compaction that clearing
	// settles is instant either way) and whose session had passed
	// prepare_at of its limit at least one model call's time before.
	Possible int `json:"preparation_possible"`
	// Latency is request to result as the runtime waits for it: all
	// requests, and those where a preparation was possible.
	Latency         Quantiles `json:"latency"`
	LatencyPossible Quantiles `json:"latency_possible"`
	// BySet breaks the requests where a preparation was possible down by
	// data set (locomo, tau-bench, swe-agent, openhands).
	BySet map[string]SetLatency `json:"by_set,omitempty"`
	// The stand-in's counts: every call, and the preparations' part.
	ModelCalls       int64 `json:"model_calls"`
	InputTokens      int64 `json:"summary_input_tokens"`
	OutputTokens     int64 `json:"summary_output_tokens"`
	PrepCalls        int64 `json:"preparation_calls"`
	PrepInputTokens  int64 `json:"preparation_input_tokens"`
	WastedTokens     int64 `json:"wasted_tokens"`
	StalePreparation int64 `json:"stale_preparations"`
	// UnusedAtEnd are the sessions whose replay ended with a preparation
	// ready that no request used (the session stopped short of its
	// limit), and UnusedAtEndInput what those preparations' model calls
	// read: a runtime that stops there pays it too.
	UnusedAtEnd      int   `json:"unused_at_end"`
	UnusedAtEndInput int64 `json:"unused_at_end_input_tokens"`
	// PacedTriggers are appends past prepare_at the preparer left alone:
	// at the session's pace its limit was further off than a preparation
	// takes (preparer.Stats.Paced).
	PacedTriggers int64 `json:"paced_triggers"`
	// Retention is LoCoMo's answers kept (see eval.Retention).
	Retention      eval.Retention `json:"locomo_retention"`
	RetentionShare float64        `json:"locomo_retention_share"`
	Seconds        float64        `json:"seconds"`
}

// SetLatency is one data set's requests where a preparation was
// possible: how many, how many were answered from one, and their latency.
type SetLatency struct {
	Possible        int       `json:"possible"`
	FromPreparation int       `json:"from_preparation"`
	Latency         Quantiles `json:"latency"`
}

// PreparedComparison is blocking against prepared on the same replays.
type PreparedComparison struct {
	Blocking PreparedRow `json:"blocking"`
	Prepared PreparedRow `json:"prepared"`
	// InputRatio is the stand-in's input tokens, prepared over blocking;
	// InputRatioReached leaves out the preparations of sessions that
	// ended short of their limit (Prepared.UnusedAtEndInput), which
	// blocking never pays: what the compactions both modes made cost.
	InputRatio        float64 `json:"input_ratio"`
	InputRatioReached float64 `json:"input_ratio_reached"`
	// Speedup is the blocking p95 over the prepared p95, where a
	// preparation was possible.
	Speedup float64 `json:"p95_speedup"`
	Pace    float64 `json:"pace"`
	// Shape names the Shape the replay ran ("": as recorded).
	Shape string `json:"shape,omitempty"`
	// Together: the two modes ran at the same time (PreparedOptions).
	Together bool `json:"together,omitempty"`
	// ModelDelayMS is every summary call's time.
	ModelDelayMS int64 `json:"model_delay_ms"`
}

// ComparePrepared replays every conversation through the service twice,
// in one run: with preparations off (blocking: the request waits for the
// summary model) and on (prepare_at 0.7). In each, every conversation
// runs at once as a runtime would: its messages arrive paced (PaceOf,
// scaled), are appended through compactor.session.append, and whenever
// the context is over the limit the runtime publishes ContextOverBudget
// and waits for the result before its next message. The model is an
// OpenAI-compatible stand-in whose every call takes opt.ModelDelay.
func ComparePrepared(ctx context.Context, convs []transcript.Conversation, cfg pipeline.Config, opt PreparedOptions) (*PreparedComparison, error) {
	opt.defaults()
	cfg.MaxMessages = 0 // the token limit decides, as the runtime's check does
	out := &PreparedComparison{Pace: opt.Pace, ModelDelayMS: opt.ModelDelay.Milliseconds(), Together: opt.Together, Shape: opt.Shape.Name}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	convs = opt.Shape.apply(convs, counter, opt.Limit)
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make([]error, 2)
	)
	if opt.Together {
		opt.Trace = &syncWriter{w: opt.Trace} // (a line is one Write)
	}
	for i, mode := range []string{"blocking", "prepared"} {
		c := cfg
		if mode == "blocking" {
			c.PrepareAt = 0
		} else if c.PrepareAt == 0 {
			c.PrepareAt = pipeline.DefaultConfig().PrepareAt
		}
		replay := func() {
			row, err := replayPaced(ctx, convs, c, opt, mode)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", mode, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(opt.Progress, "prepared comparison, %s: %d requests, p50/p95/p99 %.0f/%.0f/%.0f ms (where a preparation was possible: %d, p95 %.0f ms), %d from a preparation, model input %d tokens, %.0f s\n",
				mode, row.Requests, row.Latency.P50, row.Latency.P95, row.Latency.P99, row.Possible, row.LatencyPossible.P95, row.FromPreparation, row.InputTokens, row.Seconds)
			if mode == "blocking" {
				out.Blocking = row
			} else {
				out.Prepared = row
			}
		}
		if !opt.Together {
			if replay(); errs[i] != nil {
				return nil, errs[i]
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			replay()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if out.Blocking.InputTokens > 0 {
		out.InputRatio = float64(out.Prepared.InputTokens) / float64(out.Blocking.InputTokens)
		out.InputRatioReached = float64(out.Prepared.InputTokens-out.Prepared.UnusedAtEndInput) / float64(out.Blocking.InputTokens)
	}
	if out.Prepared.LatencyPossible.P95 > 0 {
		out.Speedup = out.Blocking.LatencyPossible.P95 / out.Prepared.LatencyPossible.P95
	}
	return out, nil
}

// syncWriter serialises the writes of replays running at once.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// request is one compaction request as the runtime saw it.
type request struct {
	set      string
	message  int // the index of the message that overflowed
	wait     time.Duration
	possible bool
	res      *client.Completed
	failed   *client.FailedError
}

func replayPaced(ctx context.Context, convs []transcript.Conversation, cfg pipeline.Config, opt PreparedOptions, mode string) (PreparedRow, error) {
	row := PreparedRow{Mode: mode, Limit: opt.Limit, Sessions: len(convs)}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return row, err
	}
	standIn, srv, sum, stop, err := modelAndServer(counter, opt.ModelDelay)
	defer stop()
	if err != nil {
		return row, err
	}
	cfg.SummaryModel, cfg.SummaryProvider = "gpt-4o-mini", "openai"
	start := time.Now()
	pr := &pacedRun{enc: json.NewEncoder(opt.Trace), names: make(map[string]string, len(convs))}
	for i := range convs {
		pr.names[fmt.Sprintf("prep-%d", i)] = convs[i].Name
	}
	traced := func(out pipeline.Preparation, err error) {
		if out.Outcome == pipeline.PrepareBelow && err == nil && out.Cause != preparer.CauseNear {
			return // (a read of a session not due; one near its limit is traced)
		}
		pr.trace(prepTraceLine(mode, pr.names[out.SessionID], time.Since(start), out, err))
	}
	svc, err := app.Start(ctx, app.Config{NATSURL: srv.ClientURL(), Provision: true, Workers: 64, PrepareWorkers: 16,
		Pipeline: cfg, Summarizer: sum, ObservePreparation: traced})
	if err != nil {
		return row, err
	}
	defer func() { _ = svc.Stop() }()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return row, err
	}
	defer nc.Close()
	cl, err := client.New(nc, client.WithSource("urn:compactor:bench"), client.WithTimeout(time.Minute))
	if err != nil {
		return row, err
	}
	store := svc.Sessions.Store()

	var wg sync.WaitGroup
	for i := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs, r, err := runPaced(ctx, cl, store, fmt.Sprintf("prep-%d", i), convs[i], counter, opt)
			pr.done(mode, convs[i].Name, rs, r, err)
		}()
	}
	wg.Wait()
	row.Seconds = time.Since(start).Seconds()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	reqs, ret := pr.reqs, pr.ret
	if len(pr.errs) > 0 {
		return row, pr.errs[0]
	}
	if row.UnusedAtEnd, row.UnusedAtEndInput, err = unusedAtEnd(ctx, store, len(convs)); err != nil {
		return row, err
	}
	row.tally(reqs)
	st := standIn.Stats()
	row.ModelCalls, row.InputTokens, row.OutputTokens = st.Calls, st.InputTokens, st.OutputTokens
	row.PrepCalls, row.PrepInputTokens = st.PrepCalls, st.PrepInputTokens
	ps := svc.Pipeline.PrepareStats()
	row.WastedTokens, row.StalePreparation = ps.WastedTokens, ps.Stale
	row.PacedTriggers = svc.Preparer.Stats().Paced
	row.Retention, row.RetentionShare = ret, ret.Share()
	return row, nil
}

// pacedRun gathers a paced replay's requests, retention, trace lines and
// errors from its runtimes and the preparer.
type pacedRun struct {
	mu    sync.Mutex
	enc   *json.Encoder
	names map[string]string // conversation names by session id
	reqs  []request
	ret   eval.Retention
	errs  []error
}

// trace writes a trace line.
func (pr *pacedRun) trace(v any) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.encode(v)
}

func (pr *pacedRun) encode(v any) {
	if err := pr.enc.Encode(v); err != nil {
		pr.errs = append(pr.errs, fmt.Errorf("trace: %w", err))
	}
}

// done adds a conversation's requests (traced), retention and error.
func (pr *pacedRun) done(mode, name string, rs []request, r eval.Retention, err error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	for _, rq := range rs {
		pr.encode(traceLineOf(mode, name, rq))
	}
	pr.reqs = append(pr.reqs, rs...)
	pr.ret = pr.ret.Add(r)
	if err != nil {
		pr.errs = append(pr.errs, fmt.Errorf("%s: %w", name, err))
	}
}

// modelAndServer starts the stand-in model (every call takes delay), an
// embedded NATS server on a store of its own, and the router that calls
// the model as an OpenAI-compatible provider; stop undoes what was
// started (also after an error).
func modelAndServer(counter *tokens.Counter, delay time.Duration) (*StandIn, *server.Server, pipeline.Summarizer, func(), error) {
	var undo []func()
	stop := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	standIn, err := StartStandIn(delay, extractive.New(counter), counter)
	if err != nil {
		return nil, nil, nil, stop, err
	}
	undo = append(undo, standIn.Close)
	dir, err := os.MkdirTemp("", "compactor-prepared-")
	if err != nil {
		return nil, nil, nil, stop, err
	}
	undo = append(undo, func() { os.RemoveAll(dir) })
	srv, err := embedded.Start(embedded.Options{Port: -1, DataDir: dir})
	if err != nil {
		return nil, nil, nil, stop, err
	}
	undo = append(undo, func() { embedded.Stop(srv) })
	sum, err := router.FromSettings(router.Settings{Provider: "openai", BaseURL: standIn.URL, Timeout: time.Minute,
		Extractive: extractive.New(counter), Getenv: func(string) string { return "" }})
	if err != nil {
		return nil, nil, nil, stop, err
	}
	return standIn, srv, sum, stop, nil
}

// prepTraceLine is the trace line of a preparation (out, err) of the
// session named name, at since the run's start.
func prepTraceLine(mode, name string, since time.Duration, out pipeline.Preparation, err error) PrepTraceLine {
	tl := PrepTraceLine{Mode: mode, Kind: "preparation", Session: name, AtMS: since.Milliseconds(), Outcome: string(out.Outcome),
		Detail: out.Detail, TokensBefore: out.TokensBefore, TokensAfter: out.TokensAfter, LLMCalls: out.LLMCalls, InputTokens: out.InputTokens,
		WastedTokens: out.WastedTokens, DurationMS: out.DurationMS, Cause: out.Cause, CauseDetail: out.CauseDetail, QueuedMS: out.QueuedMS}
	if err != nil {
		tl.Error = err.Error()
	}
	return tl
}

// traceLineOf is the trace line of request rq of the session named name.
func traceLineOf(mode, name string, rq request) TraceLine {
	tl := TraceLine{Mode: mode, Session: name, Message: rq.message, Possible: rq.possible, WaitMS: rq.wait.Milliseconds(), Failed: rq.failed != nil}
	if rq.failed != nil {
		tl.Error = fmt.Sprintf("%s: %s", rq.failed.Reason, rq.failed.Failed.Error)
	}
	if c := rq.res; c != nil {
		tl.Strategy, tl.TokensBefore, tl.TokensAfter, tl.MessagesSummarised = c.Strategy, c.TokensBefore, c.TokensAfter, c.MessagesSummarised
		tl.LLMCalls, tl.SummaryInputTokens, tl.PreparedAgeMS, tl.SummaryTokens = c.LLMCalls, c.InputTokens, c.PreparedAgeMS, c.SummaryTokens
	}
	return tl
}

// unusedAtEnd counts the sessions prep-0 to prep-(n-1) whose ready
// preparation no request committed, and the input it cost.
func unusedAtEnd(ctx context.Context, store sessions.Store, n int) (count int, input int64, err error) {
	ps, ok := store.(pipeline.PreparedStore)
	if !ok {
		return 0, 0, nil
	}
	for i := range n {
		id := fmt.Sprintf("prep-%d", i)
		p, err := ps.Prepared(ctx, id)
		if errors.Is(err, session.ErrNotFound) {
			continue
		} else if err != nil {
			return 0, 0, err
		}
		rec, err := store.Record(ctx, id)
		if err != nil {
			return 0, 0, err
		}
		if p.State == session.PreparedReady && p.Compaction != nil && rec.CompactionID != p.Compaction.ID {
			count++
			input += int64(p.InputTokens)
		}
	}
	return count, input, nil
}

// tally counts the requests into the row: compacted, from a preparation,
// failed, and the latencies, all and where a preparation was possible, by
// set too.
func (row *PreparedRow) tally(reqs []request) {
	var all, possible []time.Duration
	bySet := map[string][]time.Duration{}
	row.BySet = map[string]SetLatency{}
	for _, r := range reqs {
		row.Requests++
		all = append(all, r.wait)
		if r.possible {
			row.Possible++
			possible = append(possible, r.wait)
			bySet[r.set] = append(bySet[r.set], r.wait)
			sl := row.BySet[r.set]
			sl.Possible++
			if r.res != nil && r.res.Strategy == "prepared" {
				sl.FromPreparation++
			}
			row.BySet[r.set] = sl
		}
		switch {
		case r.failed != nil:
			row.Failures++
		case r.res.Outcome == client.OutcomeCompacted:
			row.Compacted++
			switch r.res.Strategy {
			case "prepared":
				row.FromPreparation++
			case "prepared_topup":
				row.TopUps++
			}
			if r.res.LLMCalls == 0 {
				row.NoModelCall++
			}
		}
	}
	row.Latency, row.LatencyPossible = quantiles(all), quantiles(possible)
	for set, d := range bySet {
		sl := row.BySet[set]
		sl.Latency = quantiles(d)
		row.BySet[set] = sl
	}
}

// runPaced is one runtime: it appends its conversation's messages at
// their pace, keeps count of its context as it goes (the counts the
// appends answer), asks for a compaction whenever the context is over
// the limit and waits for the result before going on.
func runPaced(ctx context.Context, cl *client.Client, store interface {
	Record(context.Context, string) (session.Record, error)
}, id string, c transcript.Conversation, counter *tokens.Counter, opt PreparedOptions) ([]request, eval.Retention, error) {
	if _, err := cl.Create(ctx, id, client.NewSession{Model: "gpt-4o", ContextLimit: opt.Limit}); err != nil {
		return nil, eval.Retention{}, err
	}
	var reqs []request
	ctxTokens := tokens.ReplyPriming()
	var crossed time.Time
	threshold := int(pipeline.DefaultConfig().PrepareAt * float64(opt.Limit))
	for i := range c.Messages {
		m := c.Messages[i]
		m.ID = fmt.Sprintf("m%d", i)
		m.Tokens = 0
		added := counter.Message(&m) // the runtime counts what it sends
		select {
		case <-ctx.Done():
			return reqs, eval.Retention{}, ctx.Err()
		case <-time.After(opt.Shape.delay(i, time.Duration(opt.Pace*float64(PaceOf(m.Role, added))))):
		}
		a, err := cl.Append(ctx, id, []client.Message{wire.Must[client.Message](m)})
		if err != nil {
			return reqs, eval.Retention{}, err
		}
		if a.Status == sessions.StatusApplied {
			ctxTokens += added
		}
		head := a.HeadSeq
		if crossed.IsZero() && ctxTokens >= threshold {
			crossed = time.Now()
		}
		if ctxTokens <= opt.Limit {
			continue
		}
		t0 := time.Now()
		res, err := cl.Compact(ctx, id, client.CompactRequest{RequestID: fmt.Sprintf("%s-%d", id, i)})
		var failed *client.FailedError
		if err != nil && !errors.As(err, &failed) {
			return reqs, eval.Retention{}, err
		}
		r := request{set: c.Source, message: i, wait: time.Since(t0), possible: !crossed.IsZero() && t0.Sub(crossed) >= opt.ModelDelay, res: res, failed: failed}
		if c := res; c != nil && c.LLMCalls == 0 && c.Strategy != "prepared" {
			r.possible = false // no model needed: instant either way
		}
		reqs = append(reqs, r)
		v, err := cl.Context(ctx, id)
		if err != nil {
			return reqs, eval.Retention{}, err
		}
		if r.res != nil && r.res.Outcome == client.OutcomeCompacted {
			if v.Tokens > opt.Limit {
				return reqs, eval.Retention{}, fmt.Errorf("message %d: compacted to %d tokens, over the limit %d", i, v.Tokens, opt.Limit)
			}
			if err := continuous(v.Messages, head); err != nil {
				return reqs, eval.Retention{}, fmt.Errorf("message %d (strategy %s): %w (the context: %s)", i, r.res.Strategy, err, outline(v.Messages))
			}
		}
		ctxTokens, crossed = v.Tokens, time.Time{}
		if ctxTokens >= threshold {
			crossed = time.Now()
		}
	}
	if len(c.QA) == 0 {
		return reqs, eval.Retention{}, nil
	}
	v, err := cl.Context(ctx, id)
	if err != nil {
		return reqs, eval.Retention{}, err
	}
	rec, err := store.Record(ctx, id)
	if err != nil {
		return reqs, eval.Retention{}, err
	}
	return reqs, eval.Measure(c, func(i int) bool { return int64(i+1) < rec.TailStartSeq }, eval.ContextUnits(wire.Must[[]session.Message](v.Messages))), nil
}

// continuous checks a compacted context against the session's head: the
// compaction message (none after a clearing alone) names what it
// summarised, and every message after that, up to the head, is in the
// context (raw or cleared), in order, none twice. A preparation applied
// on a session it was not built for (one that had moved on: stale) would
// leave a gap or cover a message twice.
func continuous(view []client.Message, head int64) error {
	var comp *client.Compaction
	next := int64(1) // without a summary, the first message after the pinned system messages
	var seqs []int64
	for i := range view {
		switch m := &view[i]; {
		case m.IsCompaction:
			if comp != nil {
				return errors.New("two compaction messages in the context")
			}
			// (A clearing's compaction message carries the summary in
			// force: its range is the summary's.)
			comp, next = m.Compaction, max(m.Compaction.ToSeq, m.Compaction.SummaryToSeq)+1
		case comp == nil && len(seqs) == 0 && m.Role == "system" && m.Seq == next:
			next++ // pinned
		default:
			seqs = append(seqs, m.Seq)
		}
	}
	for _, s := range seqs {
		if s != next {
			return fmt.Errorf("the context goes from message %d to %d: a gap or a message twice", next-1, s)
		}
		next++
	}
	if next-1 != head {
		return fmt.Errorf("the context ends at message %d, the session at %d", next-1, head)
	}
	return nil
}

// outline is a context's messages in short: each one's seq and role, a
// compaction's range.
func outline(view []client.Message) string {
	parts := make([]string, len(view))
	for i, m := range view {
		parts[i] = fmt.Sprintf("%d:%s", m.Seq, m.Role)
		if c := m.Compaction; m.IsCompaction && c != nil {
			parts[i] = fmt.Sprintf("compaction %d-%d (summary %d-%d, tail %d, pinned %v)", c.FromSeq, c.ToSeq, c.SummaryFromSeq, c.SummaryToSeq, c.TailStartSeq, c.Pinned)
		}
	}
	return strings.Join(parts, " ")
}
