// Package bench measures what a user of the compactor pays: time added per
// compaction and compactions per second against a floor of the bare
// JetStream work one compaction needs (measured in the same run, on the
// same embedded server), summary-model tokens against reading each token
// once, and how one compaction scales with the session. `compactor bench`
// runs it and writes docs/BENCHMARKS.md.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/harness/eval"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/transcript"
)

var (
	_ pipeline.Summarizer     = (*timedSummarizer)(nil)
	_ pipeline.MessagesReader = (*timedSummarizer)(nil)
)

// Options size a run. The zero value runs the figures.
type Options struct {
	// Data is the shared data folder (LoCoMo for the model cost); empty or
	// absent skips that part.
	Data string
	// Sizes are the session lengths of the overhead measure (50, 200, 1000).
	Sizes []int
	// Iterations per size (default 40; 20 for 1,000 messages and more).
	Iterations int
	// Concurrency levels of the throughput measure (1, 8, 64), each over
	// ThroughputRequests compactions (default 128) of 50-message sessions.
	Concurrency        []int
	ThroughputRequests int
	// Workers of the service and of the floor (default 8, serve's default).
	Workers int
	// Limits of the model-cost replay (2000, 4000).
	Limits []int
	// ScaleSizes of the scale measure (1000, 10000).
	ScaleSizes []int
	// Prepared sets up the comparison of blocking and prepared
	// compactions (defaults: PreparedOptions's).
	Prepared PreparedOptions
	// DriftCases is how many sessions the drift suite makes at each of
	// DriftLimits (default 8).
	DriftCases int
	// Progress receives a line per step (nil: none).
	Progress io.Writer
}

func (o *Options) defaults() {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{50, 200, 1000}
	}
	if o.Iterations <= 0 {
		o.Iterations = 40
	}
	if len(o.Concurrency) == 0 {
		o.Concurrency = []int{1, 8, 64}
	}
	if o.ThroughputRequests <= 0 {
		o.ThroughputRequests = 128
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if len(o.Limits) == 0 {
		o.Limits = []int{2000, 4000}
	}
	if len(o.ScaleSizes) == 0 {
		o.ScaleSizes = []int{1000, 10000}
	}
	if o.DriftCases <= 0 {
		o.DriftCases = 8
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// benchLimit is the context limit of the overhead and throughput sessions:
// a fixed model window that the sessions have outgrown (a shorter session
// gets two thirds of its tokens).
const benchLimit = 8000

// env is an embedded server with the service and the floor running.
type env struct {
	srv      *server.Server
	dir      string
	nc       *nats.Conn
	js       jetstream.JetStream
	client   *client.Client // the runtime's, over the public client
	store    *kvstore.Sessions
	sessions *sessions.Service // the runtime's side, as the endpoints run it
	table    *models.Table
	model    *timedSummarizer
	stop     func()
}

// timedSummarizer is the extractive summariser with its time recorded: the
// time of the "model call", which overhead excludes.
type timedSummarizer struct {
	next  pipeline.Summarizer
	nanos atomic.Int64
	// instant answers a fixed summary in the template at once: a model
	// that costs nothing, to measure the service's own capacity.
	instant atomic.Bool
}

// instantSummary is what the instant model answers.
const instantSummary = "## Goal\n- downgrade the user's reservations to economy\n## User instructions\n- (none)\n## Decisions\n- reservations updated\n" +
	"## Facts and identifiers\n- user omar_davis_3817\n## Files and artifacts\n- (none)\n## Errors and fixes\n- (none)\n## Open tasks\n- (none)\n"

// ReadsMessagesOnly forwards the wrapped summariser's answer, as the
// router does in serve.
func (t *timedSummarizer) ReadsMessagesOnly(req pipeline.SummaryRequest) bool {
	mr, ok := t.next.(pipeline.MessagesReader)
	return ok && mr.ReadsMessagesOnly(req)
}

// RereadsAll forwards the wrapped summariser's answer, as the router does
// in serve (the instant model does not reread).
func (t *timedSummarizer) RereadsAll(req pipeline.SummaryRequest) bool {
	rr, ok := t.next.(pipeline.Rereader)
	return ok && !t.instant.Load() && rr.RereadsAll(req)
}

func (t *timedSummarizer) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	if t.instant.Load() {
		return pipeline.SummaryResponse{Text: instantSummary, Model: "instant"}, nil
	}
	start := time.Now()
	res, err := t.next.Summarize(ctx, r)
	t.nanos.Add(int64(time.Since(start)))
	return res, err
}

func startEnv(ctx context.Context, workers int) (*env, error) {
	return startEnvWith(ctx, workers, pipeline.DefaultConfig())
}

func startEnvWith(ctx context.Context, workers int, cfg pipeline.Config) (*env, error) {
	dir, err := os.MkdirTemp("", "compactor-bench-")
	if err != nil {
		return nil, err
	}
	srv, err := embedded.Start(embedded.Options{Port: -1, DataDir: dir})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	e := &env{srv: srv, dir: dir, table: models.Default()}
	fail := func(err error) (*env, error) {
		e.close()
		return nil, err
	}
	counter, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		return fail(err)
	}
	e.model = &timedSummarizer{next: extractive.New(counter)}
	// The service, as serve wires it, on its own connection.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	svc, err := app.Start(runCtx, app.Config{NATSURL: srv.ClientURL(), Provision: true, Workers: workers,
		Pipeline: cfg, Models: e.table, Summarizer: e.model})
	if err != nil {
		cancel()
		return fail(err)
	}
	e.stop = func() { cancel(); _ = svc.Wait() }
	if e.nc, err = nats.Connect(srv.ClientURL()); err != nil {
		return fail(err)
	}
	if e.client, err = client.New(e.nc, client.WithSource("urn:compactor:bench")); err != nil {
		return fail(err)
	}
	if e.js, err = jetstream.New(e.nc); err != nil {
		return fail(err)
	}
	if err := provisionFloor(ctx, e.js); err != nil {
		return fail(err)
	}
	if e.store, err = kvstore.NewSessions(ctx, e.nc, e.js); err != nil {
		return fail(err)
	}
	e.sessions = sessions.New(e.store, nil, e.table)
	// The floor, on its own connection.
	fnc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return fail(err)
	}
	fjs, _ := jetstream.New(fnc)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = runFloor(runCtx, fnc, fjs, workers, e.store.Shards()) }()
	e.stop = func() {
		cancel()
		wg.Wait()
		_ = svc.Wait()
		fnc.Close()
	}
	return e, nil
}

func (e *env) close() {
	if e.stop != nil {
		e.stop()
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		embedded.Stop(e.srv)
	}
	os.RemoveAll(e.dir)
}

// sessionOf builds an n-message session from the bundled tau-bench run
// (real text): its system prompt, then its messages cycled, tool call ids
// renamed per cycle.
func sessionOf(n int) ([]session.Message, error) {
	src, err := transcript.Parse(demo.Trajectory)
	if err != nil {
		return nil, err
	}
	out := []session.Message{src[0]}
	body := src[1:]
	for cycle := 0; len(out) < n; cycle++ {
		for _, m := range body {
			if len(out) >= n {
				break
			}
			m.ToolCalls = slices.Clone(m.ToolCalls)
			for i := range m.ToolCalls {
				m.ToolCalls[i].ID = fmt.Sprintf("%s_%d", m.ToolCalls[i].ID, cycle)
			}
			if m.ToolCallID != "" {
				m.ToolCallID = fmt.Sprintf("%s_%d", m.ToolCallID, cycle)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

// createSessions stores count copies of an n-message session.
func (e *env) createSessions(ctx context.Context, prefix string, n, count int) ([]string, error) {
	msgs, err := sessionOf(n)
	if err != nil {
		return nil, err
	}
	c, err := tokens.ForEncoding(e.table.Lookup("gpt-4o").Encoding)
	if err != nil {
		return nil, err
	}
	limit := min(benchLimit, 2*c.Context(msgs)/3) // always over its window
	ids := make([]string, count)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%d-%d", prefix, n, i)
		if _, err := e.sessions.Create(ctx, session.Record{SessionID: ids[i], Model: "gpt-4o", ContextLimit: limit}, slices.Clone(msgs)); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// compactService requests a compaction of sid from the service and waits
// for the result, as a runtime does.
func (e *env) compactService(ctx context.Context, sid string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := e.client.Compact(ctx, sid, client.CompactRequest{Model: "gpt-4o"})
	if err != nil {
		return err
	}
	if res.Outcome != client.OutcomeCompacted {
		return fmt.Errorf("service did not compact %s: %+v", sid, res)
	}
	return nil
}

// compactFloor does the same against the floor.
func (e *env) compactFloor(ctx context.Context, sid string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	id := uuid.NewString()
	sub, err := e.nc.SubscribeSync(floorResPrefix + sid)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	m := nats.NewMsg(floorReqPrefix + sid)
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set("ce-id", id)
	m.Data = []byte(`{"session_id":"` + sid + `"}`)
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		return err
	}
	for {
		r, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("floor %s: %w", sid, err)
		}
		if r.Header.Get("ce-id") == id {
			return nil
		}
	}
}

// Latency is a distribution's summary in milliseconds.
type Latency struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

func latency(d []time.Duration) Latency {
	return Latency{P50: quantile(d, 0.5), P99: quantile(d, 0.99)}
}

// OverheadRow is the overhead measure for one session length.
type OverheadRow struct {
	Messages   int     `json:"messages"`
	Tokens     int     `json:"tokens"`
	Samples    int     `json:"samples"`
	EndToEnd   Latency `json:"end_to_end"`
	Model      Latency `json:"model"`
	Overhead   Latency `json:"overhead"` // end to end less the model call
	Floor      Latency `json:"floor"`
	RatioP50   float64 `json:"overhead_over_floor_p50"`
	RatioP99   float64 `json:"overhead_over_floor_p99"`
	ServiceSec float64 `json:"-"`
}

func (e *env) overhead(ctx context.Context, n, iters int, progress io.Writer) (OverheadRow, error) {
	const warmup = 3
	row := OverheadRow{Messages: n, Samples: iters}
	msgs, err := sessionOf(n)
	if err != nil {
		return row, err
	}
	c, _ := tokens.ForEncoding(e.table.Lookup("gpt-4o").Encoding)
	row.Tokens = c.Context(msgs)
	svcIDs, err := e.createSessions(ctx, "svc", n, iters+warmup)
	if err != nil {
		return row, err
	}
	floorIDs, err := e.createSessions(ctx, "floor", n, iters+warmup)
	if err != nil {
		return row, err
	}
	var e2e, model, over, floor []time.Duration
	// Interleaved, so both see the same machine at the same time.
	for i := range iters + warmup {
		m0 := e.model.nanos.Load()
		start := time.Now()
		if err := e.compactService(ctx, svcIDs[i]); err != nil {
			return row, err
		}
		total := time.Since(start)
		mt := time.Duration(e.model.nanos.Load() - m0)
		start = time.Now()
		if err := e.compactFloor(ctx, floorIDs[i]); err != nil {
			return row, err
		}
		ft := time.Since(start)
		if i < warmup {
			continue
		}
		e2e, model, over, floor = append(e2e, total), append(model, mt), append(over, total-mt), append(floor, ft)
	}
	row.EndToEnd, row.Model, row.Overhead, row.Floor = latency(e2e), latency(model), latency(over), latency(floor)
	row.RatioP50 = row.Overhead.P50 / row.Floor.P50
	row.RatioP99 = row.Overhead.P99 / row.Floor.P99
	fmt.Fprintf(progress, "overhead %5d messages: service %.2f ms (model %.2f ms) overhead %.2f ms, floor %.2f ms: %.1f×\n",
		n, row.EndToEnd.P50, row.Model.P50, row.Overhead.P50, row.Floor.P50, row.RatioP50)
	return row, nil
}

// ThroughputRow is compactions per second at one concurrency: the
// service with the extractive model, with an instant model (the service's
// own capacity), and the floor.
type ThroughputRow struct {
	Concurrency  int     `json:"concurrency"`
	Requests     int     `json:"requests"`
	Service      float64 `json:"service_per_s"`
	Instant      float64 `json:"service_instant_model_per_s"`
	Floor        float64 `json:"floor_per_s"`
	Ratio        float64 `json:"service_over_floor"`
	InstantRatio float64 `json:"instant_over_floor"`
}

func (e *env) throughput(ctx context.Context, conc, requests int, progress io.Writer) (ThroughputRow, error) {
	row := ThroughputRow{Concurrency: conc, Requests: requests}
	const n = 50
	svcIDs, err := e.createSessions(ctx, fmt.Sprintf("tsvc%d", conc), n, requests)
	if err != nil {
		return row, err
	}
	instIDs, err := e.createSessions(ctx, fmt.Sprintf("tinst%d", conc), n, requests)
	if err != nil {
		return row, err
	}
	floorIDs, err := e.createSessions(ctx, fmt.Sprintf("tfloor%d", conc), n, requests)
	if err != nil {
		return row, err
	}
	drive := func(ids []string, do func(context.Context, string) error) (time.Duration, error) {
		work := make(chan string, len(ids))
		for _, id := range ids {
			work <- id
		}
		close(work)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var first error
		start := time.Now()
		for range conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for id := range work {
					if err := do(ctx, id); err != nil {
						mu.Lock()
						first = cmpErr(first, err)
						mu.Unlock()
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start), first
	}
	// The three runs take turns, a round of each at a time, so that a
	// busy moment of the machine falls on all of them alike.
	rounds := max(1, min(4, requests/(4*conc)))
	var took [3]time.Duration
	for r := range rounds {
		part := func(ids []string) []string { return ids[r*len(ids)/rounds : (r+1)*len(ids)/rounds] }
		d, err := drive(part(svcIDs), e.compactService)
		if err != nil {
			return row, err
		}
		took[0] += d
		e.model.instant.Store(true)
		d, err = drive(part(instIDs), e.compactService)
		e.model.instant.Store(false)
		if err != nil {
			return row, err
		}
		took[1] += d
		if d, err = drive(part(floorIDs), e.compactFloor); err != nil {
			return row, err
		}
		took[2] += d
	}
	row.Service = float64(requests) / took[0].Seconds()
	row.Instant = float64(requests) / took[1].Seconds()
	row.Floor = float64(requests) / took[2].Seconds()
	row.Ratio, row.InstantRatio = row.Service/row.Floor, row.Instant/row.Floor
	fmt.Fprintf(progress, "throughput ×%-2d: service %.0f/s (instant model %.0f/s), floor %.0f/s: %.2f (%.2f)\n",
		conc, row.Service, row.Instant, row.Floor, row.Ratio, row.InstantRatio)
	return row, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ScaleRow is one compaction of a long session on the KV store.
type ScaleRow struct {
	Messages   int     `json:"messages"`
	Tokens     int     `json:"tokens"`
	Bytes      int     `json:"bytes"`
	Millis     float64 `json:"ms"`
	ModelMs    float64 `json:"model_ms"`
	PeakHeapMB float64 `json:"peak_heap_mb"`
	LLMCalls   int     `json:"llm_calls"`
}

// scale compacts one n-message session through the pipeline on KV and
// samples the heap while it runs.
func (e *env) scale(ctx context.Context, n int, progress io.Writer) (ScaleRow, error) {
	row := ScaleRow{Messages: n}
	msgs, err := sessionOf(n)
	if err != nil {
		return row, err
	}
	c, _ := tokens.ForEncoding(e.table.Lookup("gpt-4o").Encoding)
	row.Tokens = c.Context(msgs)
	for _, m := range msgs {
		row.Bytes += len(m.Text())
	}
	sid := fmt.Sprintf("scale-%d", n)
	if _, err := e.sessions.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o", ContextLimit: benchLimit}, msgs); err != nil {
		return row, err
	}
	counter, _ := tokens.ForEncoding("cl100k_base")
	model := &timedSummarizer{next: extractive.New(counter)}
	breakers, err := kvstore.NewBreakers(ctx, e.nc, e.js)
	if err != nil {
		return row, err
	}
	svc, err := pipeline.New(e.store, breakers, model, pipeline.DefaultConfig())
	if err != nil {
		return row, err
	}
	msgs = nil
	runtime.GC()
	base := heapBytes()
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			if h := heapBytes(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	res, err := svc.Compact(ctx, pipeline.Request{ID: uuid.NewString(), SessionID: sid, Trigger: pipeline.TriggerOverBudget})
	row.Millis = float64(time.Since(start)) / float64(time.Millisecond)
	close(done)
	if err != nil {
		return row, err
	}
	if res.Outcome != pipeline.OutcomeCompacted {
		return row, fmt.Errorf("scale %d: outcome %s", n, res.Outcome)
	}
	row.ModelMs = float64(model.nanos.Load()) / float64(time.Millisecond)
	row.LLMCalls = res.LLMCalls
	if p := peak.Load(); p > base {
		row.PeakHeapMB = float64(p-base) / (1 << 20)
	}
	fmt.Fprintf(progress, "scale %6d messages (%d tokens): %.0f ms (model %.0f ms), peak heap +%.1f MB\n", n, row.Tokens, row.Millis, row.ModelMs, row.PeakHeapMB)
	return row, nil
}

// heapBytes is the live heap as the runtime counts it now.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Report is a whole run.
type Report struct {
	Machine    Machine         `json:"machine"`
	Command    string          `json:"command"`
	Started    time.Time       `json:"started"`
	Seconds    float64         `json:"seconds"`
	Overhead   []OverheadRow   `json:"overhead"`
	Throughput []ThroughputRow `json:"throughput"`
	ModelCost  []CostRow       `json:"model_cost"`
	CostNote   string          `json:"model_cost_note,omitempty"`
	Scale      []ScaleRow      `json:"scale"`
	// Ladder compares the reduction ladder with summary only on the same
	// replays (issue 13).
	Ladder     []eval.LadderRow `json:"ladder"`
	LadderNote string           `json:"ladder_note,omitempty"`
	// Prepared compares blocking and prepared compactions through the
	// service on paced replays (issue 14).
	Prepared     *PreparedComparison `json:"prepared,omitempty"`
	PreparedNote string              `json:"prepared_note,omitempty"`
	// Long is the same comparison on the long agent runs
	// (agent_trajectories/long), one per LongLimits.
	Long     []*PreparedComparison `json:"long_prepared,omitempty"`
	LongNote string                `json:"long_prepared_note,omitempty"`
	// Window is the comparison of section 6 again at WindowLimit and a
	// real agent loop's pace (issue 26's goals on the bundled sets).
	Window     *PreparedComparison `json:"window_prepared,omitempty"`
	WindowNote string              `json:"window_prepared_note,omitempty"`
	// Drift is the drift suite (issue 45) at each of DriftLimits, the
	// offline summariser compacting incrementally.
	Drift []eval.DriftReport `json:"drift"`
}

// Run runs every measure. It returns an error if any fails.
func Run(ctx context.Context, opt Options) (*Report, error) {
	opt.defaults()
	rep := &Report{Machine: machine(), Started: time.Now().UTC()}
	e, err := startEnv(ctx, opt.Workers)
	if err != nil {
		return nil, err
	}
	defer e.close()
	for _, n := range opt.Sizes {
		iters := opt.Iterations
		if n >= 1000 {
			iters = max(iters/2, 5)
		}
		row, err := e.overhead(ctx, n, iters, opt.Progress)
		if err != nil {
			return nil, fmt.Errorf("overhead %d: %w", n, err)
		}
		rep.Overhead = append(rep.Overhead, row)
	}
	for _, c := range opt.Concurrency {
		row, err := e.throughput(ctx, c, opt.ThroughputRequests, opt.Progress)
		if err != nil {
			return nil, fmt.Errorf("throughput %d: %w", c, err)
		}
		rep.Throughput = append(rep.Throughput, row)
	}
	for _, n := range opt.ScaleSizes {
		row, err := e.scale(ctx, n, opt.Progress)
		if err != nil {
			return nil, fmt.Errorf("scale %d: %w", n, err)
		}
		rep.Scale = append(rep.Scale, row)
	}
	rows, note, err := modelCost(ctx, opt.Data, opt.Limits, opt.Progress)
	if err != nil {
		return nil, err
	}
	rep.ModelCost, rep.CostNote = rows, note
	if rep.Ladder, rep.LadderNote, err = ladder(ctx, opt.Data, opt.Progress); err != nil {
		return nil, fmt.Errorf("ladder: %w", err)
	}
	if rep.Prepared, rep.PreparedNote, err = prepared(ctx, opt.Data, opt.Prepared, opt.Progress); err != nil {
		return nil, fmt.Errorf("prepared: %w", err)
	}
	if rep.Long, rep.LongNote, err = longPrepared(ctx, opt.Data, opt.Prepared, opt.Progress); err != nil {
		return nil, fmt.Errorf("long runs: %w", err)
	}
	w := opt.Prepared
	w.Limit, w.Pace, w.Together = WindowLimit, LongPace, true
	if rep.Window, rep.WindowNote, err = prepared(ctx, opt.Data, w, opt.Progress); err != nil {
		return nil, fmt.Errorf("prepared at %d: %w", WindowLimit, err)
	}
	if rep.Drift, err = drift(ctx, opt.DriftCases, opt.Progress); err != nil {
		return nil, fmt.Errorf("drift: %w", err)
	}
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// DriftLimits are the windows of the drift suite in make bench.
var DriftLimits = []int{3000, 4000}

// drift runs the drift suite's n sessions at DriftLimits with the offline
// summariser.
func drift(ctx context.Context, n int, progress io.Writer) ([]eval.DriftReport, error) {
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		return nil, err
	}
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	var out []eval.DriftReport
	for _, limit := range DriftLimits {
		total := eval.DriftReport{Name: "all", Limit: limit}
		for _, c := range eval.DriftCases(n, 1) {
			loop, err := eval.NewMemoryLoop(extractive.New(counter), cfg)
			if err != nil {
				return nil, err
			}
			rep, err := eval.DriftReplay(ctx, loop, c, counter, cfg, limit)
			if err != nil {
				return nil, err
			}
			total.Add(rep)
		}
		if progress != nil {
			fmt.Fprintf(progress, "drift at %d: %d compactions\n", limit, total.Compactions)
		}
		out = append(out, total)
	}
	return out, nil
}

// Machine says where a run was made.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Memory string `json:"memory"`
	Go     string `json:"go"`
	OS     string `json:"os"`
}

func machine() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			m.Memory = fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))
		}
	}
	return m
}
