// Package chaos is `compactor chaos`: the service as a reliability engineer
// would try it on one machine. A three-node JetStream cluster (in process,
// R3 streams and buckets), two service replicas (real `compactor serve`
// processes), a local model failing a share of its calls, and runtimes
// that create sessions, append to them and request compactions through the
// public contract, while the run kills the sessions stream's leader and a
// replica (SIGKILL) and restarts them. Then it checks what every runtime was
// told against what is stored, and reports.
package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/internal/api"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/sessions"
)

// Options size a run.
type Options struct {
	// Binary is the compactor executable the replicas run.
	Binary string
	// Runtimes is how many runtimes write at once (default 50).
	Runtimes int
	// Duration of the load (default 60 s); faults happen within it.
	Duration time.Duration
	// FailRate is the share of model calls that fail (default 0.3).
	FailRate float64
	// ContextLimit of every session (default 2,500 tokens).
	ContextLimit int
	// Progress, when set, receives what the run is doing.
	Progress io.Writer
}

func (o *Options) defaults() {
	if o.Runtimes <= 0 {
		o.Runtimes = 50
	}
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.FailRate <= 0 {
		o.FailRate = 0.3
	}
	if o.ContextLimit <= 0 {
		o.ContextLimit = 2500
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Report is what a run found.
type Report struct {
	Runtimes     int           `json:"runtimes"`
	Duration     time.Duration `json:"duration"`
	FailRate     float64       `json:"model_fail_rate"`
	ContextLimit int           `json:"context_limit"`
	Faults       []string      `json:"faults"`

	AppendsAcknowledged int `json:"appends_acknowledged"` // messages an append answered as stored
	MessagesStored      int `json:"messages_stored"`      // runtime messages found in the stores
	MessagesLost        int `json:"messages_lost"`        // acknowledged and not stored
	MessagesDuplicated  int `json:"messages_duplicated"`  // stored more than once (by id or by content)
	SessionsMissing     int `json:"sessions_missing_messages"`
	AppendRetries       int `json:"append_retries"` // answers that said retry, or no answer in time
	AppendErrors        int `json:"append_errors"`  // answers that were neither stored nor retry

	Requests         int            `json:"requests"`
	Results          int            `json:"results"`           // requests with a result event in the stream
	ResultsMissing   int            `json:"results_missing"`   // requests without one at the end
	DuplicateResults int            `json:"duplicate_results"` // result events a core subscriber saw twice
	Outcomes         map[string]int `json:"outcomes"`
	Compactions      int            `json:"compactions"`

	ModelCalls         int64 `json:"model_calls"`          // every call the model got
	ModelCallsFailed   int64 `json:"model_calls_failed"`   // answered with an error on purpose
	ModelCallsAnswered int64 `json:"model_calls_answered"` // answered with a summary
	ModelCallsNeeded   int   `json:"model_calls_needed"`   // llm_calls of the completed results
	// PreparationCalls are the answered calls made by preparations (no
	// request waited for them); Prepared the results answered from one.
	PreparationCalls int64   `json:"model_calls_preparations"`
	Prepared         int     `json:"answered_from_preparations"`
	CallsPerRequest  float64 `json:"model_calls_per_request"`

	LatencyP50 time.Duration `json:"latency_p50"`
	LatencyP99 time.Duration `json:"latency_p99"`
	LatencyMax time.Duration `json:"latency_max"`
}

// Pass reports whether the run met the goals: nothing lost or duplicated,
// every request answered once, model calls per request at most 1.05.
func (r Report) Pass() bool {
	return r.MessagesLost == 0 && r.MessagesDuplicated == 0 && r.SessionsMissing == 0 && r.ResultsMissing == 0 &&
		r.DuplicateResults == 0 && r.AppendErrors == 0 && r.CallsPerRequest <= 1.05
}

// run is one run's state.
type run struct {
	o     Options
	dir   string
	c     *embedded.Cluster
	fp    *fakeprovider.Server
	nc    *nats.Conn
	js    jetstream.JetStream
	start time.Time
	// loadStart is when the runtimes began: the faults are placed within
	// the load.
	loadStart time.Time

	mu        sync.Mutex
	replicas  []*replica
	faults    []string
	published map[string]time.Time     // request id -> when
	answered  map[string]time.Duration // request id -> latency of its first result
	seen      map[string]int           // result event id -> times seen by a core subscriber
	acked     map[string][]string      // session -> message ids acknowledged
	retries   atomic.Int64
	errs      atomic.Int64
	firstErr  atomic.Value
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Progress, "[%5.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *run) fault(format string, args ...any) {
	s := fmt.Sprintf("%5.1fs: %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
	r.mu.Lock()
	r.faults = append(r.faults, s)
	r.mu.Unlock()
	r.logf("%s", fmt.Sprintf(format, args...))
}

// Run does one run and returns its report.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if o.Binary == "" {
		return nil, errors.New("chaos: the compactor binary is required")
	}
	dir, err := os.MkdirTemp("", "compactor-chaos-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &run{o: o, dir: dir, start: time.Now(), published: map[string]time.Time{}, answered: map[string]time.Duration{},
		seen: map[string]int{}, acked: map[string][]string{}}

	r.logf("starting a three-node JetStream cluster")
	if r.c, err = embedded.StartCluster(3, filepath.Join(dir, "cluster")); err != nil {
		return nil, err
	}
	defer r.c.Shutdown()
	if r.fp, err = fakeprovider.Start(fakeprovider.Rates(o.FailRate, 0, 100*time.Millisecond, 400*time.Millisecond)); err != nil {
		return nil, err
	}
	defer r.fp.Close()
	if r.nc, err = nats.Connect(r.c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		return nil, err
	}
	defer r.nc.Close()
	if r.js, err = jetstream.New(r.nc); err != nil {
		return nil, err
	}
	if err := r.provision(ctx); err != nil {
		return nil, err
	}
	if _, err := r.nc.Subscribe(events.ResultSubjects, r.onResult); err != nil {
		return nil, err
	}
	for i := range 2 {
		if err := r.startReplica(i); err != nil {
			return nil, err
		}
	}
	defer r.stopReplicas()
	if err := r.waitForService(ctx); err != nil {
		return nil, err
	}

	r.logf("%d runtimes for %v; model failing %.0f%% of calls", o.Runtimes, o.Duration, 100*o.FailRate)
	r.loadStart = time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for i := range o.Runtimes {
		wg.Add(1)
		go func() { defer wg.Done(); r.runtime(loadCtx, i) }()
	}
	r.chaos(loadCtx)
	wg.Wait()
	r.logf("load over; waiting for the requests still open")
	r.drain(ctx, 90*time.Second)
	r.stopReplicas()
	return r.verify(ctx)
}

func (r *run) provision(ctx context.Context) error {
	var err error
	for range 30 { // the cluster may still be placing its first assets
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = app.ProvisionAll(pctx, r.js, 3, 10*time.Second, 5)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("provision R3: %w", err)
}

// replica is a `compactor serve` process.
type replica struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
}

func (r *run) startReplica(i int) error {
	logf, err := os.OpenFile(filepath.Join(r.dir, fmt.Sprintf("replica-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.o.Binary, "serve", "--nats-url", r.c.URLs(), "--provision=false", "--provider", "openai",
		"--base-url", r.fp.URL, "--summary-model", "gpt-4o-mini", "--metrics-addr", "", "--log-format", "json", "--log-level", "warn",
		"--shutdown-grace", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start replica %d: %w", i, err)
	}
	rep := &replica{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(rep.done) }()
	r.mu.Lock()
	for len(r.replicas) <= i {
		r.replicas = append(r.replicas, nil)
	}
	r.replicas[i] = rep
	r.mu.Unlock()
	return nil
}

// kill stops a replica at once (SIGKILL), as a crash does.
func (p *replica) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stopReplicas stops every replica cleanly (SIGTERM), killing those that
// have not exited within 15 s.
func (r *run) stopReplicas() {
	r.mu.Lock()
	reps := r.replicas
	r.replicas = nil
	r.mu.Unlock()
	for _, p := range reps {
		if p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	timeout := time.After(15 * time.Second)
	for _, p := range reps {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-timeout:
			p.kill()
		}
	}
}

// waitForService waits until the micro service answers.
func (r *run) waitForService(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.nc.Request("$SRV.PING."+api.Name, nil, time.Second); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("the service did not answer within 60s (logs in %s)", r.dir)
}

// chaos injects the faults: the sessions stream's leader killed and
// restarted, then a replica killed with SIGKILL and restarted.
func (r *run) chaos(ctx context.Context) {
	at := func(frac float64) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(r.loadStart.Add(time.Duration(float64(r.o.Duration) * frac)))):
			return true
		}
	}
	if !at(0.2) {
		return
	}
	stream := "KV_" + kvstore.SessionsBucket
	if l := r.c.StreamLeader(stream); l >= 0 {
		r.fault("killed node N%d, leader of %s", l+1, stream)
		r.c.Kill(l)
		if at(0.35) {
			if err := r.c.Restart(l); err != nil {
				r.fault("restart N%d failed: %v", l+1, err)
			} else {
				r.fault("restarted node N%d", l+1)
			}
		} else {
			_ = r.c.Restart(l)
		}
	}
	if !at(0.55) {
		return
	}
	r.mu.Lock()
	p := r.replicas[0]
	r.mu.Unlock()
	if p != nil {
		p.kill()
		r.fault("killed replica 1 (SIGKILL)")
	}
	if !at(0.65) {
		_ = r.startReplica(0)
		return
	}
	if err := r.startReplica(0); err != nil {
		r.fault("restart replica 1 failed: %v", err)
	} else {
		r.fault("restarted replica 1")
	}
}

func (r *run) onResult(m *nats.Msg) {
	typ := m.Header.Get("ce-type")
	if typ != events.TypeCompactionCompleted && typ != events.TypeCompactionFailed {
		return
	}
	var d struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(m.Data, &d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[m.Header.Get("ce-id")]++
	if at, ok := r.published[d.RequestID]; ok {
		if _, done := r.answered[d.RequestID]; !done {
			r.answered[d.RequestID] = time.Since(at)
		}
	}
}

// call makes a session request as a runtime does: the same body again on
// a retry answer or no answer, until it is answered or ctx ends.
func (r *run) call(ctx context.Context, subject string, body []byte, out any) error {
	for try := 0; ; try++ {
		m, err := r.nc.Request(subject, body, 10*time.Second)
		switch {
		case err == nil && m.Header.Get(micro.ErrorCodeHeader) == "":
			return json.Unmarshal(m.Data, out)
		case err == nil:
			var eb api.ErrorBody
			if json.Unmarshal(m.Data, &eb) != nil || eb.Status != api.StatusRetry {
				return fmt.Errorf("%s answered %s: %s", subject, m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader))
			}
		case !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		r.retries.Add(1)
		if try > 60 || ctx.Err() != nil && try > 30 {
			return fmt.Errorf("%s: no answer after %d tries", subject, try+1)
		}
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
	}
}

// runtime is one agent runtime: its session, a turn at a time (a user
// message and an answer, with ids), a compaction request whenever its
// context is over the limit, waiting for the result as a runtime does.
func (r *run) runtime(ctx context.Context, n int) {
	sid := fmt.Sprintf("chaos-%02d", n)
	create, _ := json.Marshal(map[string]any{"session_id": sid, "context_limit": r.o.ContextLimit,
		"messages": []map[string]any{{"id": sid + "-sys", "role": "system", "content": "You are a support agent for an airline. Be brief."}}})
	var c sessions.Created
	if err := r.call(context.Background(), api.SubjectCreate, create, &c); err != nil {
		r.fail(fmt.Errorf("%s: create: %w", sid, err))
		return
	}
	r.ack(sid, sid+"-sys")
	tokens := c.Tokens
	for turn := 0; ctx.Err() == nil; turn++ {
		u, a := fmt.Sprintf("%s-u%04d", sid, turn), fmt.Sprintf("%s-a%04d", sid, turn)
		body, _ := json.Marshal(map[string]any{"session_id": sid, "messages": []map[string]any{
			{"id": u, "role": "user", "content": fmt.Sprintf("[%s turn %d] My booking REF-%s-%d: can I move the flight to day %d and keep seat %dA?", sid, turn, sid, turn, turn%28+1, turn%30+1)},
			{"id": a, "role": "assistant", "content": fmt.Sprintf("[%s turn %d] Booking REF-%s-%d moved to day %d; seat %dA kept; fare difference $%d.", sid, turn, sid, turn, turn%28+1, turn%30+1, 10+turn%90)}}})
		var ap sessions.Appended
		if err := r.call(context.Background(), api.SubjectAppend, body, &ap); err != nil {
			r.fail(fmt.Errorf("%s turn %d: append: %w", sid, turn, err))
			return
		}
		r.ack(sid, u, a)
		tokens += ap.Tokens
		if tokens > r.o.ContextLimit {
			if after, ok := r.compact(ctx, sid, tokens); ok {
				tokens = after
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(200+rand.IntN(300)) * time.Millisecond):
		}
	}
}

// compact publishes a ContextOverBudget request and waits for its result;
// it returns the context's tokens after a completed one.
func (r *run) compact(ctx context.Context, sid string, tokens int) (int, bool) {
	id := uuid.NewString()
	ev, err := events.NewEvent(id, events.TypeContextOverBudget, "urn:chaos-runtime", sid, time.Now(),
		events.RequestData{SessionID: sid, Model: "gpt-4o", ContextLimit: r.o.ContextLimit, RequestedTokens: tokens})
	if err != nil {
		r.fail(err)
		return 0, false
	}
	h, body := events.EncodeBinary(ev)
	r.mu.Lock()
	r.published[id] = time.Now()
	r.mu.Unlock()
	for try := 0; ; try++ {
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.js.PublishMsg(pctx, &nats.Msg{Subject: events.Subject(events.TypeContextOverBudget, sid), Header: h, Data: body})
		cancel()
		if err == nil {
			break
		}
		if try > 30 {
			r.fail(fmt.Errorf("%s: publish request: %w", sid, err))
			return 0, false
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Wait for the result as a runtime does (the load may end meanwhile:
	// the run waits for open requests after).
	for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		r.mu.Lock()
		_, done := r.answered[id]
		r.mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var v sessions.ContextView
	b, _ := json.Marshal(map[string]any{"session_id": sid})
	if err := r.call(context.Background(), api.SubjectContext, b, &v); err != nil {
		return 0, false
	}
	return v.Tokens, true
}

func (r *run) ack(sid string, ids ...string) {
	r.mu.Lock()
	r.acked[sid] = append(r.acked[sid], ids...)
	r.mu.Unlock()
}

func (r *run) fail(err error) {
	r.errs.Add(1)
	r.firstErr.CompareAndSwap(nil, err)
	r.logf("error: %v", err)
}

// drain waits until every published request has a result, or within.
func (r *run) drain(ctx context.Context, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		r.mu.Lock()
		open := len(r.published) - len(r.answered)
		r.mu.Unlock()
		if open == 0 {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verify checks what the runtimes were told against the stores.
func (r *run) verify(ctx context.Context) (*Report, error) {
	rep := &Report{Runtimes: r.o.Runtimes, Duration: r.o.Duration, FailRate: r.o.FailRate, ContextLimit: r.o.ContextLimit, Faults: r.faults, Outcomes: map[string]int{}}
	rep.AppendRetries, rep.AppendErrors = int(r.retries.Load()), int(r.errs.Load())
	store, err := kvstore.NewSessions(ctx, r.nc, r.js)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	acked := r.acked
	r.mu.Unlock()
	for sid, ids := range acked {
		rep.AppendsAcknowledged += len(ids)
		var msgs []sessionMessage
		var herr error
		for try := 0; try < 20; try++ {
			var all []sessionMessage
			ms, _, err := store.History(ctx, sid)
			if herr = err; err == nil {
				for _, m := range ms {
					all = append(all, sessionMessage{ID: m.ID, Text: m.Content.Text})
				}
				msgs = all
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		if herr != nil {
			return nil, fmt.Errorf("history of %s: %w", sid, herr)
		}
		byID, byText := map[string]int{}, map[string]int{}
		for _, m := range msgs {
			byID[m.ID]++
			byText[m.Text]++
		}
		rep.MessagesStored += len(msgs)
		missing := 0
		for _, id := range ids {
			if byID[id] == 0 {
				missing++
			}
		}
		for _, n := range byID {
			rep.MessagesDuplicated += n - 1
		}
		for _, n := range byText {
			rep.MessagesDuplicated += n - 1
		}
		rep.MessagesLost += missing
		if missing > 0 {
			rep.SessionsMissing++
		}
	}

	// Results: the stream's, by request.
	r.mu.Lock()
	published := maps.Clone(r.published)
	answered := r.answered
	seen := r.seen
	r.mu.Unlock()
	rep.Requests = len(published)
	stored, err := r.storedResults(ctx)
	if err != nil {
		return nil, err
	}
	var lat []time.Duration
	for id := range published {
		// A completion stored after a retryable failure of the same
		// request is its outcome.
		res, ok := stored[events.RequestResultID(id)]
		if !ok {
			res, ok = stored[events.FailedResultID(id)]
		}
		if !ok {
			rep.ResultsMissing++
			continue
		}
		rep.Results++
		rep.Outcomes[res.outcome]++
		if res.outcome == "compacted" {
			rep.Compactions++
		}
		if res.typ == events.TypeCompactionCompleted {
			rep.ModelCallsNeeded += res.llmCalls
		}
		if res.strategy == "prepared" || res.strategy == "prepared_topup" {
			rep.Prepared++
		}
		if d, ok := answered[id]; ok {
			lat = append(lat, d)
		}
	}
	for _, n := range seen {
		if n > 1 {
			rep.DuplicateResults += n - 1
		}
	}
	rep.ModelCalls, rep.ModelCallsFailed, _, rep.ModelCallsAnswered = r.fp.Stats()
	rep.PreparationCalls = r.fp.PreparationCalls()
	if rep.ModelCallsNeeded > 0 {
		// Duplicated work is what requests call beyond what their
		// results account for; preparations are counted apart.
		rep.CallsPerRequest = float64(rep.ModelCallsAnswered-rep.PreparationCalls) / float64(rep.ModelCallsNeeded)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		rep.LatencyP50, rep.LatencyP99, rep.LatencyMax = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	}
	if err, ok := r.firstErr.Load().(error); ok && err != nil {
		r.logf("first runtime error: %v", err)
	}
	return rep, nil
}

type sessionMessage struct{ ID, Text string }

type storedResult struct {
	typ, outcome, strategy string
	llmCalls               int
}

// storedResults reads every result event in COMPACTION_EVENTS by event id.
func (r *run) storedResults(ctx context.Context) (map[string]storedResult, error) {
	oc, err := r.js.OrderedConsumer(ctx, consumer.ResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.CompletedPrefix + ">", events.FailedPrefix + ">"}})
	if err != nil {
		return nil, err
	}
	out := map[string]storedResult{}
	for {
		// (A fetch that does not wait may find a consumer just made with
		// nothing delivered yet: wait, and stop at the last pending one.)
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n, pending := 0, uint64(1)
		for m := range batch.Messages() {
			n++
			if md, err := m.Metadata(); err == nil {
				pending = md.NumPending
			}
			var d struct {
				Outcome  string `json:"outcome"`
				Reason   string `json:"reason"`
				LLMCalls int    `json:"llm_calls"`
				Strategy string `json:"strategy"`
			}
			_ = json.Unmarshal(m.Data(), &d)
			typ := m.Headers().Get("ce-type")
			outcome := d.Outcome
			if typ == events.TypeCompactionFailed {
				outcome = "failed: " + d.Reason
			}
			out[m.Headers().Get("ce-id")] = storedResult{typ: typ, outcome: outcome, strategy: d.Strategy, llmCalls: d.LLMCalls}
		}
		if n == 0 || pending == 0 {
			return out, nil
		}
	}
}

// Markdown renders the report as docs/RELIABILITY.md.
func (r Report) Markdown(command string) string {
	var b bytes.Buffer
	verdict := "**Goals met**"
	if !r.Pass() {
		verdict = "**Goals not met**"
	}
	fmt.Fprintf(&b, "# Reliability under faults\n\nGenerated by `%s` (`make chaos`). %s: 0 messages lost or duplicated, 0 sessions missing messages, every request one result (none duplicated), model calls per request ≤ 1.05 (the model's own failures excluded).\n\n", command, verdict)
	fmt.Fprintf(&b, "A three-node JetStream cluster in one process (R3 streams and buckets), two `compactor serve` processes, %d runtimes for %v, each creating its session, appending a turn (two messages with their own ids) every 200-500 ms through `compactor.session.append`, and publishing a `ContextOverBudget` request whenever its context is over %d tokens (then waiting for the result). The model (a local OpenAI-compatible server) fails %.0f%% of its calls with OpenAI's 500 and 503 bodies and answers the others in 100-500 ms. Faults, during the load:\n\n", r.Runtimes, r.Duration, r.ContextLimit, 100*r.FailRate)
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	b.WriteString("\n| measure | value |\n| --- | --- |\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("appends acknowledged (messages)", r.AppendsAcknowledged)
	row("messages stored", r.MessagesStored)
	row("messages lost (acknowledged, not stored)", r.MessagesLost)
	row("messages duplicated", r.MessagesDuplicated)
	row("sessions missing messages", r.SessionsMissing)
	row("append answers that said retry (or none in 10 s)", r.AppendRetries)
	row("append errors (neither stored nor retry)", r.AppendErrors)
	row("requests", r.Requests)
	row("requests with a result in the stream", r.Results)
	row("requests without a result", r.ResultsMissing)
	row("duplicate results seen by a core subscriber", r.DuplicateResults)
	var outs []string
	for k, v := range r.Outcomes {
		outs = append(outs, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(outs)
	row("outcomes", strings.Join(outs, ", "))
	row("model calls (all / failed on purpose / answered)", fmt.Sprintf("%d / %d / %d", r.ModelCalls, r.ModelCallsFailed, r.ModelCallsAnswered))
	row("model calls made by preparations (answered)", r.PreparationCalls)
	row("results answered from a preparation", r.Prepared)
	row("model calls the results account for", r.ModelCallsNeeded)
	row("model calls per request (answered by requests ÷ accounted for)", fmt.Sprintf("%.3f", r.CallsPerRequest))
	row("request to result, p50 / p99 / max", fmt.Sprintf("%v / %v / %v", r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond), r.LatencyMax.Round(time.Millisecond)))
	b.WriteString("\nHow each figure is found: every message a runtime was told is stored (applied or already stored) is looked up by id in its session's history afterwards; a message stored twice would show as the same id or the same text twice. Results are read from `COMPACTION_EVENTS` by the result id derived from each request id, and a core subscriber on `compaction.>` counts every publish (JetStream's dedup keeps the stream to one, but a subscriber would see a second publish). Answered model calls, less those made by preparations (they say so in the `X-Compactor-Purpose` header), are compared with the `llm_calls` of the completed results: a request worked on twice (a redelivery of work still in progress) would call the model twice for one result. A result answered from a preparation made no call itself. The p99 includes the requests a killed replica held: they are redelivered after the consumer's ack wait (10 s here).\n")
	return b.String()
}
