package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/recall"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

// RecallOptions size a recall run (compactor eval recall).
type RecallOptions struct {
	// Data is laid out as ../shared/data: locomo/, agent_trajectories/
	// (and its long/).
	Data string
	// Limit is the window the LoCoMo chats and the short agent runs are
	// replayed at (default 4000); LongLimit the long runs' (default
	// 32000).
	Limit, LongLimit int
	// Sizes are the session lengths search latency is measured at
	// (default 1,000 and 10,000 messages); Queries how many searches each
	// (default 200).
	Sizes   []int
	Queries int
	// Progress, when set, hears what the run does.
	Progress io.Writer
}

func (o *RecallOptions) defaults() {
	if o.Limit <= 0 {
		o.Limit = 4000
	}
	if o.LongLimit <= 0 {
		o.LongLimit = 32000
	}
	if len(o.Sizes) == 0 {
		o.Sizes = []int{1000, 10000}
	}
	if o.Queries <= 0 {
		o.Queries = 200
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// RecallRun is what a recall run measured.
type RecallRun struct {
	Machine Machine   `json:"machine"`
	Started time.Time `json:"started"`
	// LoCoMo is the evidence recall over every LoCoMo chat replayed at the
	// limit; Agents and Long the artifacts of the agent runs, short and
	// long.
	LoCoMo eval.RecallReport `json:"locomo"`
	Agents eval.AgentRecall  `json:"agents"`
	Long   eval.AgentRecall  `json:"long"`
	// Latency is search through compactor.session.search, by session
	// length.
	Latency []SearchLatency `json:"latency"`
	Notes   []string        `json:"notes,omitempty"`
}

// SearchLatency is search through the endpoint on a session of Messages
// messages: the first search (which builds the replica's index from the
// log), then searches in a row, then a search after each append (the
// index catches up on the appended message).
type SearchLatency struct {
	Messages    int     `json:"messages"`
	ColdMS      float64 `json:"first_search_ms"`
	P50         float64 `json:"p50_ms"`
	P95         float64 `json:"p95_ms"`
	AppendedP95 float64 `json:"after_append_p95_ms"`
	// BytesPerMessage is the index's memory over its messages.
	BytesPerMessage float64 `json:"index_bytes_per_message"`
}

// RunRecall replays the data's conversations with the offline summariser,
// measures what a search finds of what the final contexts summarised, and
// times searches through a service.
func RunRecall(ctx context.Context, o RecallOptions) (*RecallRun, error) {
	o.defaults()
	run := &RecallRun{Machine: machine(), Started: time.Now().UTC(), LoCoMo: eval.RecallReport{Name: "all", Source: "locomo", Limit: o.Limit},
		Agents: eval.AgentRecall{Name: "all", Source: "agents", Limit: o.Limit}, Long: eval.AgentRecall{Name: "all", Source: "long", Limit: o.LongLimit}}
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	convs, err := transcript.LoadDataDir(o.Data)
	if err != nil {
		return nil, err
	}
	var chats []transcript.Conversation
	for _, c := range convs {
		fmt.Fprintf(o.Progress, "recall: %s at %d\n", c.Name, o.Limit)
		tail, err := finalTail(ctx, c, counter, o.Limit)
		if err != nil {
			return nil, err
		}
		summarised := func(i int) bool { return int64(i+1) < tail }
		if c.Source == "locomo" {
			run.LoCoMo.Add(eval.MeasureRecall(c, o.Limit, summarised))
			chats = append(chats, c)
			continue
		}
		run.Agents.Add(eval.MeasureAgentRecall(c, o.Limit, summarised))
	}
	long, err := transcript.LoadLongDir(filepath.Join(o.Data, "agent_trajectories", "long"))
	if err != nil {
		run.Notes = append(run.Notes, fmt.Sprintf("long runs skipped: %v", err))
	}
	for _, c := range long {
		fmt.Fprintf(o.Progress, "recall: %s at %d\n", c.Name, o.LongLimit)
		tail, err := finalTail(ctx, c, counter, o.LongLimit)
		if err != nil {
			return nil, err
		}
		run.Long.Add(eval.MeasureAgentRecall(c, o.LongLimit, func(i int) bool { return int64(i+1) < tail }))
	}
	if len(chats) == 0 {
		run.Notes = append(run.Notes, "latency skipped: no LoCoMo chats to search")
		return run, nil
	}
	if run.Latency, err = searchLatency(ctx, chats, o); err != nil {
		return nil, err
	}
	return run, nil
}

// finalTail replays c at limit (messages only: a chat's MaxMessages is
// not what recall measures) and returns where its final raw tail starts.
func finalTail(ctx context.Context, c transcript.Conversation, counter *tokens.Counter, limit int) (int64, error) {
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	rep, err := eval.Replay(ctx, c, counter, extractive.New(counter), cfg, limit)
	if err != nil {
		return 0, fmt.Errorf("replay %s: %w", c.Name, err)
	}
	return rep.TailStartSeq, nil
}

// searchLatency times searches through the service on sessions made of
// the chats' messages (cycled to each size), with their questions.
func searchLatency(ctx context.Context, chats []transcript.Conversation, o RecallOptions) ([]SearchLatency, error) {
	e, err := startEnv(ctx, 8)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var pool []session.Message
	var questions []string
	for _, c := range chats {
		pool = append(pool, c.Messages...)
		for _, q := range c.QA {
			questions = append(questions, q.Question)
		}
	}
	var out []SearchLatency
	for _, n := range o.Sizes {
		fmt.Fprintf(o.Progress, "recall: search latency at %d messages\n", n)
		row, err := e.searchLatency(ctx, pool, questions, n, o.Queries)
		if err != nil {
			return nil, fmt.Errorf("search latency at %d: %w", n, err)
		}
		out = append(out, row)
	}
	return out, nil
}

func (e *env) searchLatency(ctx context.Context, pool []session.Message, questions []string, n, queries int) (SearchLatency, error) {
	row := SearchLatency{Messages: n}
	msgs := make([]session.Message, n)
	ix := recall.NewIndex()
	for i := range msgs {
		msgs[i] = session.Message{Role: pool[i%len(pool)].Role, Name: pool[i%len(pool)].Name, Content: pool[i%len(pool)].Content}
		d := recall.DocOf(&msgs[i])
		d.Seq = int64(i + 1)
		ix.Add(d)
	}
	row.BytesPerMessage = float64(ix.Bytes()) / float64(n)
	sid := fmt.Sprintf("recall-%d", n)
	if _, err := e.sessions.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o", ContextLimit: 128000}, msgs); err != nil {
		return row, err
	}
	search := func(q string) (time.Duration, error) {
		start := time.Now()
		ans, err := e.client.Search(ctx, contract.SearchBody{SessionID: sid, Query: q})
		if err == nil && len(ans.Hits) == 0 {
			err = fmt.Errorf("no hit for %q", q)
		}
		return time.Since(start), err
	}
	cold, err := search(questions[0])
	if err != nil {
		return row, err
	}
	row.ColdMS = ms(cold)
	var warm, appended []time.Duration
	for i := range queries {
		d, err := search(questions[i%len(questions)])
		if err != nil {
			return row, err
		}
		warm = append(warm, d)
	}
	for i := range max(queries/4, 1) {
		m := session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("one more thing, number %d: %s", i, questions[(i*7)%len(questions)]))}
		if _, err := e.sessions.Append(ctx, sid, []session.Message{m}, session.AppendOptions{}); err != nil {
			return row, err
		}
		d, err := search(questions[(i*7)%len(questions)])
		if err != nil {
			return row, err
		}
		appended = append(appended, d)
	}
	row.P50, row.P95 = quantile(warm, 0.5), quantile(warm, 0.95)
	row.AppendedP95 = quantile(appended, 0.95)
	return row, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// quantile is the p quantile of d in milliseconds (nearest rank; 0 for
// none).
func quantile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return ms(s[int(p*float64(len(s)-1)+0.5)])
}

// The recall goals (issue 46).
const (
	recallGoal5      = 0.85
	recallGoal10     = 0.93
	answerableGoal   = 0.90
	agentRecallGoal  = 0.99
	searchP95Goal    = 50.0
	indexBytesGoal   = 1024.0
	recallGoalDepth5 = 5
)

// Markdown is the run as docs/RECALL.md.
func (r *RecallRun) Markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Recall")
	w("")
	w("Written by `compactor eval recall --out docs/RECALL.md` on %s (%d cores, %s), %s. Do not edit by hand.", r.Machine.CPU, r.Machine.Cores, r.Machine.Go, r.Started.Format("2006-01-02"))
	w("")
	w("Every conversation of `../shared/data` is replayed through the runtime loop with the offline summariser; then, with no model, a search (`compactor.session.search`'s ranking, mode `terms`) looks for what the final context summarised. A hit shows its message and a neighbour each side (at most %d tokens); something is *found at k* when its message is within the snippets of the first k hits.", contract.SnippetTokens)
	w("")
	l := r.LoCoMo
	w("## LoCoMo evidence")
	w("")
	w("For every question with evidence (categories 1, 2, 4), the question's text is the query; each evidence turn the context summarised by the end of the replay at %d tokens counts once.", l.Limit)
	w("")
	w("| questions | with summarised evidence | evidence turns summarised | found at 1 | at 5 | at 10 | answerable |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	w("| %d | %d | %d | %.3f | %.3f | %.3f | %.3f |", l.Questions, l.Summarised, l.Evidence, l.Share(1), l.Share(5), l.Share(10), l.AnswerableShare())
	w("")
	w("By question (all of a question's summarised evidence found): %.3f at 1, %.3f at 5, %.3f at 10. *Answerable*: every evidence turn of the question is in the final context or found at 5.",
		l.QuestionShare(1), l.QuestionShare(5), l.QuestionShare(10))
	w("")
	w("## Agent runs: files, commands and errors")
	w("")
	w("Each file, command and error the probes of `compactor eval probes` find in a message the context summarised, searched by its own text (a file's name, a command whole, an error's line).")
	w("")
	w("| runs | window | files | commands | errors | all, found at 5 |")
	w("| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, a := range []struct {
		name string
		r    eval.AgentRecall
	}{{"agent trajectories", r.Agents}, {"long agent runs", r.Long}} {
		t := a.r.Total()
		w("| %s | %d | %s | %s | %s | %s |", a.name, a.r.Limit, tally(a.r.Scores[eval.ProbeFiles]), tally(a.r.Scores[eval.ProbeCommands]), tally(a.r.Scores[eval.ProbeErrors]), tally(t))
	}
	w("")
	w("## Search latency through compactor.session.search")
	w("")
	w("A session of LoCoMo's messages (cycled to its length) searched with LoCoMo's questions through the endpoint on an embedded server: the first search (the replica builds the index from the log), then searches in a row, then one after each append (the index reads the appended message first).")
	w("")
	w("| messages | first search | p50 | p95 | p95 after an append | index bytes a message |")
	w("| ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range r.Latency {
		w("| %d | %.1f ms | %.2f ms | %.2f ms | %.2f ms | %.0f |", s.Messages, s.ColdMS, s.P50, s.P95, s.AppendedP95, s.BytesPerMessage)
	}
	w("")
	w("## Against the goals (issue 46)")
	w("")
	for _, g := range r.Goals() {
		w("- %s", g)
	}
	for _, n := range r.Notes {
		w("- note: %s", n)
	}
	return b.String()
}

func tally(t eval.Tally) string {
	if t.Checks == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d (%.1f %%)", t.Kept, t.Checks, 100*t.Share())
}

// Goals are the run's figures against issue 46's goals, a line each.
func (r *RecallRun) Goals() []string {
	met := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	l := r.LoCoMo
	out := []string{
		fmt.Sprintf("LoCoMo evidence found at 5: %.3f (goal %.2f): %s", l.Share(recallGoalDepth5), recallGoal5, met(l.Share(5) >= recallGoal5)),
		fmt.Sprintf("LoCoMo evidence found at 10: %.3f (goal %.2f): %s", l.Share(10), recallGoal10, met(l.Share(10) >= recallGoal10)),
		fmt.Sprintf("LoCoMo questions answerable at %d tokens: %.3f (goal %.2f): %s", l.Limit, l.AnswerableShare(), answerableGoal, met(l.AnswerableShare() >= answerableGoal)),
	}
	for _, a := range []struct {
		name string
		r    eval.AgentRecall
	}{{"agent trajectories", r.Agents}, {"long agent runs", r.Long}} {
		if t := a.r.Total(); t.Checks > 0 {
			out = append(out, fmt.Sprintf("%s: %d of %d files, commands and errors found at 5 (goal %.0f %%): %s", a.name, t.Kept, t.Checks, 100*agentRecallGoal, met(t.Share() >= agentRecallGoal)))
		}
	}
	for _, s := range r.Latency {
		out = append(out, fmt.Sprintf("search at %d messages: p95 %.2f ms, %.2f ms after an append (goal %.0f ms); index %.0f bytes a message (goal %.0f): %s",
			s.Messages, s.P95, s.AppendedP95, searchP95Goal, s.BytesPerMessage, indexBytesGoal, met(max(s.P95, s.AppendedP95) <= searchP95Goal && s.BytesPerMessage <= indexBytesGoal)))
	}
	return out
}

// Met says whether every goal was met.
func (r *RecallRun) Met() bool {
	for _, g := range r.Goals() {
		if strings.HasSuffix(g, "**missed**") {
			return false
		}
	}
	return true
}

// WriteRecall writes the run's Markdown to path.
func WriteRecall(path string, r *RecallRun) error {
	return os.WriteFile(path, []byte(r.Markdown()), 0o644)
}
