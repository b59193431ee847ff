// Package chaos is `compactor chaos`: the service as a reliability engineer
// would try it on one machine. A three-node JetStream cluster (in process,
// R3 streams and buckets), two service replicas (real `compactor serve`
// processes), a local model that fails, rate-limits (429 with Retry-After),
// hangs and answers slowly, runtimes that create sessions, append to them
// and request compactions through the public contract (sometimes two at
// once for one session), and a hostile runtime sending what the contract
// refuses, while the run takes the model down for an outage, kills the
// JetStream meta leader and the leaders of the session data, session
// records, requests, events and breakers, kills a replica (SIGKILL) and
// pauses the other (SIGSTOP). After the load it restarts the whole cluster
// with the replicas, and fills a store of its own to its limit. Then it
// checks what every runtime was told against what is stored, and reports
// each goal met or missed with its figures.
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

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/config"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/tokens"
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
	// RateLimited is the share of model calls answered 429 with a
	// Retry-After of 1 s (default 0.05); Hang the share that hang until
	// the replica's call timeout (default 0.01).
	RateLimited, Hang float64
	// Outage is how long the model fails every call, once (default 7 s).
	Outage time.Duration
	// Pause is how long a replica is stopped with SIGSTOP (default 20 s).
	Pause time.Duration
	// Drain bounds the wait for the requests still open after the load
	// (default 90 s); one never answered by then counts as without result.
	Drain time.Duration
	// BreakerCooldown is the replicas' (default the service's): no request
	// may be refused circuit_open a cooldown after the model's outage, and
	// the load must last past that for the goal to mean anything.
	BreakerCooldown time.Duration
	// Progress, when set, receives what the run is doing.
	Progress io.Writer
	// Keep leaves the run's directory (the nodes' stores, the replicas'
	// logs) in place; the progress says where.
	Keep bool
}

// The replicas' settings that the goals depend on.
const (
	// ackWait is the durable consumer's (its default): a request held by
	// a killed or paused replica is delivered again after it.
	ackWait = consumer.AckWait
	// outageTail is how long after the model's outage a summary may still
	// fail of it (its last retries, the provider's backoff).
	outageTail = 5 * time.Second
	// attemptTimeout is how long a runtime waits for one endpoint answer
	// before it sends the same request again (safe: writes are idempotent).
	attemptTimeout = 3 * time.Second
)

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
	if o.RateLimited <= 0 {
		o.RateLimited = 0.05
	}
	if o.Hang <= 0 {
		o.Hang = 0.01
	}
	if o.Outage <= 0 {
		o.Outage = 7 * time.Second
	}
	if o.Pause <= 0 {
		o.Pause = 20 * time.Second
	}
	if o.Drain <= 0 {
		o.Drain = 90 * time.Second
	}
	if o.BreakerCooldown <= 0 {
		o.BreakerCooldown = pipeline.DefaultBreakerCooldown
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
	RateLimited  float64       `json:"model_rate_limited"`
	Hang         float64       `json:"model_hang_rate"`
	ContextLimit int           `json:"context_limit"`
	// CallTimeout is the replicas' limit of one model call (the service's
	// default; hedging cuts a hung call's wait short).
	CallTimeout     time.Duration `json:"call_timeout"`
	BreakerCooldown time.Duration `json:"breaker_cooldown"`
	Faults          []string      `json:"faults"`

	AppendsAcknowledged int `json:"appends_acknowledged"` // messages an append answered as stored
	MessagesStored      int `json:"messages_stored"`      // runtime messages found in the stores
	MessagesLost        int `json:"messages_lost"`        // acknowledged and not stored
	MessagesDuplicated  int `json:"messages_duplicated"`  // stored more than once (by id or by content)
	SessionsMissing     int `json:"sessions_missing_messages"`
	AppendRetries       int `json:"append_retries"` // answers that said retry, or no answer in time
	AppendErrors        int `json:"append_errors"`  // answers that were neither stored nor retry

	Requests         int `json:"requests"`
	Results          int `json:"results"`           // requests with a result event in the stream
	ResultsMissing   int `json:"results_missing"`   // requests without one at the end
	DuplicateResults int `json:"duplicate_results"` // result events a core subscriber saw twice
	// TwoResults are the requests with both a completion and a failure
	// in the stream.
	TwoResults int `json:"requests_with_two_results"`
	// ContextsChecked are the contexts a runtime read after a completed
	// compaction; OverLimit those still over the limit.
	ContextsChecked int            `json:"contexts_checked"`
	OverLimit       []string       `json:"over_limit,omitempty"`
	Outcomes        map[string]int `json:"outcomes"`
	Compactions     int            `json:"compactions"`

	ModelCalls         int64 `json:"model_calls"`          // every call the model got
	ModelCallsFailed   int64 `json:"model_calls_failed"`   // answered with an error on purpose
	ModelCallsAnswered int64 `json:"model_calls_answered"` // answered with a summary
	ModelCallsHung     int64 `json:"model_calls_hung"`     // left hanging on purpose
	ModelCallsNeeded   int   `json:"model_calls_needed"`   // llm_calls of the completed results
	// PreparationCalls are the answered calls made by preparations (no
	// request waited for them); Prepared the results answered from one.
	PreparationCalls int64   `json:"model_calls_preparations"`
	Prepared         int     `json:"answered_from_preparations"`
	CallsPerRequest  float64 `json:"model_calls_per_request"`
	// ExtraCalls are the calls requests made beyond what their results
	// account for; CallsInFlightAtFaults the calls in flight when a replica
	// was killed or paused (work the replica taking over may do again).
	ExtraCalls            int64 `json:"model_calls_extra"`
	CallsInFlightAtFaults int64 `json:"model_calls_in_flight_at_faults"`

	LatencyP50 time.Duration `json:"latency_p50"`
	LatencyP99 time.Duration `json:"latency_p99"`
	LatencyMax time.Duration `json:"latency_max"`

	// Pairs are the times a runtime sent two requests for its session at
	// once; PairsBothCompacted those where both compacted (two
	// compactions for one need).
	Pairs              int `json:"request_pairs"`
	PairsBothCompacted int `json:"request_pairs_both_compacted"`
	// FailedInOutage are the requests answered summary_failed while the
	// model was down (or within outageTail after): the outage's doing.
	FailedInOutage int `json:"failed_in_outage"`
	// OpenBreakers are the breakers open at the end; LockedAfterOutage the
	// requests refused circuit_open though published more than a cooldown
	// after the model's outage ended.
	OpenBreakers      int `json:"open_breakers"`
	LockedAfterOutage int `json:"circuit_open_after_outage"`
	// AfterCooldown are the requests published more than a cooldown after
	// the outage: the goal's sample.
	AfterCooldown int `json:"requests_a_cooldown_after_outage"`
	// AppendRate is messages acknowledged per second over the load before
	// a replica was paused (its faults included: a runtime waiting for a
	// result appends nothing meanwhile); AppendRatePaused while it was
	// paused (SIGSTOP).
	AppendRate       float64 `json:"append_rate"`
	AppendRatePaused float64 `json:"append_rate_paused"`

	Hostile   HostileReport `json:"hostile"`
	Restart   RestartReport `json:"restart"`
	FullStore FullReport    `json:"full_store"`
}

// Goal is one promise a run checks, with the figures that decide it.
type Goal struct {
	Name    string `json:"name"`
	Met     bool   `json:"met"`
	Figures string `json:"figures"`
}

// Goals are the promises a run checks: nothing acknowledged is lost or
// stored twice, every request has its one outcome in the stream and most
// complete, one compaction per need, no duplicated model work, latency
// within bounds, no session locked after an outage, and a paused replica
// does not stop the others. Bounds are generous enough for a loaded 2-core
// machine; each is far from what a broken build gives.
func (r Report) Goals() []Goal {
	completed := 0
	for k, n := range r.Outcomes {
		if !strings.HasPrefix(k, "failed") {
			completed += n
		}
	}
	share := func(a, b int) float64 {
		if b == 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	g := []Goal{
		{"no acknowledged message lost", r.MessagesLost == 0 && r.SessionsMissing == 0,
			fmt.Sprintf("%d of %d lost, %d sessions missing messages", r.MessagesLost, r.AppendsAcknowledged, r.SessionsMissing)},
		{"no message stored twice", r.MessagesDuplicated == 0, fmt.Sprintf("%d duplicated", r.MessagesDuplicated)},
		{"every append answered as stored or retry", r.AppendErrors == 0 && r.AppendsAcknowledged > 0,
			fmt.Sprintf("%d errors, %d acknowledged", r.AppendErrors, r.AppendsAcknowledged)},
		{"every request has its outcome in the stream", r.ResultsMissing == 0 && r.Requests > 0,
			fmt.Sprintf("%d of %d without one", r.ResultsMissing, r.Requests)},
		{"one result per request: none with both a completion and a failure", r.TwoResults == 0,
			fmt.Sprintf("%d with both; %d result events a core subscriber saw twice under one id (a publish whose acknowledgement did not come, sent again)", r.TwoResults, r.DuplicateResults)},
		{"at least 80 % of requests completed (those the model's outage failed aside)", share(completed, r.Requests-r.FailedInOutage) >= 0.8,
			fmt.Sprintf("%d of %d (%.0f %%); %d failed in the outage", completed, r.Requests-r.FailedInOutage, 100*share(completed, r.Requests-r.FailedInOutage), r.FailedInOutage)},
		{"no context over its limit after a completed compaction", len(r.OverLimit) == 0 && r.ContextsChecked > 0,
			fmt.Sprintf("%d of %d over%s", len(r.OverLimit), r.ContextsChecked, listed("sessions and tokens", r.OverLimit))},
		{"two requests at once compact once", r.PairsBothCompacted == 0,
			fmt.Sprintf("%d of %d pairs compacted twice", r.PairsBothCompacted, r.Pairs)},
		{"no request worked on twice (model calls beyond what results account for at most 5 %, plus those in flight when a replica was killed or paused, plus one a pair: two requests at once on two replicas may both call before one commits)",
			float64(r.ExtraCalls) <= 0.05*float64(r.ModelCallsNeeded)+float64(r.CallsInFlightAtFaults)+float64(r.Pairs),
			fmt.Sprintf("%d extra of %d accounted for (%.3f per request), %d in flight at the faults, %d pairs", r.ExtraCalls, r.ModelCallsNeeded, r.CallsPerRequest, r.CallsInFlightAtFaults, r.Pairs)},
		{"request to result p50 at most 3 s, p99 at most 60 s", r.LatencyP50 <= 3*time.Second && r.LatencyP99 <= time.Minute && r.Results > 0,
			fmt.Sprintf("p50 %v, p99 %v", r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond))},
		{"no session locked after the model's outage (and requests came a cooldown after it)", r.OpenBreakers == 0 && r.LockedAfterOutage == 0 && r.AfterCooldown > 0,
			fmt.Sprintf("%d breakers open at the end, %d of %d requests a cooldown (%v) after the outage refused circuit_open", r.OpenBreakers, r.LockedAfterOutage, r.AfterCooldown, r.BreakerCooldown)},
		{"appends go on while a replica is paused (at least a third of the rate before)", r.AppendRatePaused >= r.AppendRate/3,
			fmt.Sprintf("%.1f messages/s paused, %.1f before", r.AppendRatePaused, r.AppendRate)},
		{"hostile input refused with a client error, nothing of it stored", r.Hostile.Sent > 0 && r.Hostile.Refused == r.Hostile.Sent && r.Hostile.Stored == 0,
			fmt.Sprintf("%d of %d refused 4xx, %d hostile messages stored%s", r.Hostile.Refused, r.Hostile.Sent, r.Hostile.Stored, listed("answered otherwise", r.Hostile.Accepted))},
		{"a whole-cluster restart: /livez from the start, every replica ready within 15 s of the leaders, serving after", r.Restart.Done &&
			r.Restart.LivezAfter <= 5*time.Second && r.Restart.ServingAfter <= 15*time.Second && r.Restart.Appended == r.Runtimes,
			fmt.Sprintf("/livez %v after the start, leaders %v after the nodes' start, ready %v after them, %d of %d sessions appended after%s",
				r.Restart.LivezAfter.Round(time.Millisecond), r.Restart.LeadersAfter.Round(100*time.Millisecond), r.Restart.ServingAfter.Round(100*time.Millisecond),
				r.Restart.Appended, r.Runtimes, errorText(r.Restart.Error))},
		{"a full store: a storage error within 1 s, /readyz says so, a delete frees space, appends resume within 10 s, nothing lost", fullMet(r.FullStore),
			fmt.Sprintf("%d appends stored, then %s %s in %v (%q); /readyz %d %q; deleted %v; resumed in %v, ready again %v; %d lost%s",
				r.FullStore.Acknowledged, r.FullStore.Code, r.FullStore.Status, r.FullStore.RefusedIn.Round(time.Millisecond), r.FullStore.Message,
				r.FullStore.Readyz, r.FullStore.ReadyzBody, r.FullStore.Deleted, r.FullStore.ResumedIn.Round(time.Millisecond), r.FullStore.ReadyAfter,
				r.FullStore.Lost, errorText(r.FullStore.Error))},
	}
	return g
}

func fullMet(f FullReport) bool {
	return f.Done && f.Code == "507" && f.Status == "not_applied" && f.RefusedIn <= time.Second && f.Readyz == 503 &&
		f.Deleted && f.ResumedIn <= 10*time.Second && f.ReadyAfter && f.Lost == 0 && f.Acknowledged > 0
}

// listed is s after "; label: ", or "" when s is empty.
func listed(label string, s []string) string {
	if len(s) == 0 {
		return ""
	}
	return "; " + label + ": " + strings.Join(s, ", ")
}

func errorText(e string) string {
	if e == "" {
		return ""
	}
	return "; error: " + e
}

// Pass reports whether the run met every goal.
func (r Report) Pass() bool {
	for _, g := range r.Goals() {
		if !g.Met {
			return false
		}
	}
	return true
}

// Missed says which goals the run missed, with their figures ("" when
// none).
func (r Report) Missed() string {
	var out []string
	for _, g := range r.Goals() {
		if !g.Met {
			out = append(out, g.Name+": "+g.Figures)
		}
	}
	return strings.Join(out, "; ")
}

// run is one run's state.
type run struct {
	counter *tokens.Counter
	o       Options
	dir     string
	c       *embedded.Cluster
	fp      *fakeprovider.Server
	nc      *nats.Conn
	js      jetstream.JetStream
	start   time.Time
	// loadStart is when the runtimes began: the faults are placed within
	// the load.
	loadStart time.Time

	mu        sync.Mutex
	replicas  []*replica
	faults    []string
	published map[string]time.Time     // request id -> when
	sessionOf map[string]string        // request id -> its session
	answered  map[string]time.Duration // request id -> latency of its first result
	completed map[string]bool          // request id -> its first result is a completion
	// checkedLimit counts the contexts read after a completed compaction,
	// overLimit those over the limit ("session tokens").
	checkedLimit int
	overLimit    []string
	seen         map[string]int      // result event id -> times seen by a core subscriber
	acked        map[string][]string // session -> message ids acknowledged
	ackedAt      []time.Time         // when each message was acknowledged
	pairs        [][2]string         // requests sent two at once for one session
	// outageEnd and pauseFrom/pauseTo place the model's outage and the
	// replica's pause.
	outageStart, outageEnd, pauseFrom, pauseTo, loadEnd time.Time
	// lostCalls are the model calls in flight when a replica was killed
	// or paused: work that may be done again by the replica taking over.
	lostCalls atomic.Int64
	// hostileRep is what the hostile runtime sent and was answered.
	hostileRep HostileReport
	retries    atomic.Int64
	errs       atomic.Int64
	firstErr   atomic.Value
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
	if o.Keep {
		fmt.Fprintf(o.Progress, "keeping the run's stores and logs in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	r := &run{o: o, dir: dir, start: time.Now(), published: map[string]time.Time{}, answered: map[string]time.Duration{},
		sessionOf: map[string]string{}, seen: map[string]int{}, acked: map[string][]string{}, completed: map[string]bool{}, hostileRep: HostileReport{Codes: map[string]int{}}}
	// The runtimes count their own context, as a runtime does.
	if r.counter, err = tokens.ForEncoding("o200k_base"); err != nil {
		return nil, err
	}

	stop, err := r.setUp(ctx)
	defer stop()
	if err != nil {
		return nil, err
	}
	r.load(ctx)
	r.logf("load over; waiting for the requests still open")
	r.drain(ctx, o.Drain)
	restart := r.restartAll(ctx)
	if restart.Error != "" {
		r.fault("whole-cluster restart: %s", restart.Error)
	}
	r.drain(ctx, o.Drain)
	r.stopReplicas()
	rep, err := r.verify(ctx)
	if err != nil {
		return nil, err
	}
	rep.Restart = restart
	r.c.Shutdown()
	r.logf("a store filled to its limit (a node of its own, max_file_store %d MiB)", fullStoreBytes>>20)
	rep.FullStore = r.fullStore(ctx)
	return rep, nil
}

// setUp starts the three-node cluster, the model, the connection, the
// streams and both replicas, and waits for the service; stop undoes what
// was started (also after an error).
func (r *run) setUp(ctx context.Context) (stop func(), err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	r.logf("starting a three-node JetStream cluster")
	if r.c, err = embedded.StartCluster(3, filepath.Join(r.dir, "cluster")); err != nil {
		return stop, err
	}
	undo = append(undo, r.c.Shutdown)
	if r.fp, err = fakeprovider.Start(r.model()); err != nil {
		return stop, err
	}
	undo = append(undo, r.fp.Close)
	if r.nc, err = nats.Connect(r.c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)); err != nil {
		return stop, err
	}
	undo = append(undo, r.nc.Close)
	if r.js, err = jetstream.New(r.nc); err != nil {
		return stop, err
	}
	if err := r.provision(ctx); err != nil {
		return stop, err
	}
	if _, err := r.nc.Subscribe(contract.ResultSubjects, r.onResult); err != nil {
		return stop, err
	}
	undo = append(undo, r.stopReplicas)
	for i := range 2 {
		if err := r.startReplica(i); err != nil {
			return stop, err
		}
	}
	return stop, r.waitForService(ctx)
}

// load runs the runtimes, the hostile client and the faults for the run's
// duration.
func (r *run) load(ctx context.Context) {
	o := r.o
	r.logf("%d runtimes for %v; model failing %.0f%% of calls", o.Runtimes, o.Duration, 100*o.FailRate)
	r.loadStart = time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for i := range o.Runtimes {
		wg.Add(1)
		go func() { defer wg.Done(); r.runtime(loadCtx, i) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.hostile(loadCtx) }()
	r.chaos(loadCtx)
	wg.Wait()
	r.mu.Lock()
	r.loadEnd = time.Now()
	r.mu.Unlock()
}

func (r *run) provision(ctx context.Context) error {
	var err error
	for range 30 { // the cluster may still be placing its first assets
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = app.ProvisionAll(pctx, r.nc, r.js, app.Provisioning{Replicas: 3, Shards: 3, AckWait: ackWait, MaxDeliver: 5})
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
	cmd     *exec.Cmd
	addr    string        // its HTTP endpoints (/livez, /readyz, /metrics)
	started time.Time     // when its process started
	done    chan struct{} // closed when it has exited
}

func (r *run) startReplica(i int) error {
	logf, err := os.OpenFile(filepath.Join(r.dir, fmt.Sprintf("replica-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		logf.Close()
		return err
	}
	// The service's default call timeout: a hung call is hedged, not
	// waited out.
	level := "warn"
	if r.o.Keep { // logs kept to be read: what each request did
		level = "info"
	}
	cmd := exec.Command(r.o.Binary, "serve", "--nats-url", r.c.URLs(), "--provision=false", "--provider", "openai",
		"--base-url", r.fp.URL, "--summary-model", "gpt-4o-mini", "--metrics-addr", addr, "--log-format", "json", "--log-level", level,
		"--shutdown-grace", "5s", "--breaker-cooldown", r.o.BreakerCooldown.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start replica %d: %w", i, err)
	}
	rep := &replica{cmd: cmd, addr: addr, started: time.Now(), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(rep.done) }()
	r.mu.Lock()
	for len(r.replicas) <= i {
		r.replicas = append(r.replicas, nil)
	}
	r.replicas[i] = rep
	r.mu.Unlock()
	return nil
}

// model is how the model answers outside its outage.
func (r *run) model() fakeprovider.Behaviour {
	return fakeprovider.Mix{Fail: r.o.FailRate, RateLimited: r.o.RateLimited, Hang: r.o.Hang, RetryAfter: time.Second,
		Delay: 100 * time.Millisecond, Jitter: 400 * time.Millisecond}.Behaviour()
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

// waitReady waits until replica i says on /readyz that it serves.
func (r *run) waitReady(ctx context.Context, i int) error {
	r.mu.Lock()
	p := r.replicas[i]
	r.mu.Unlock()
	var code int
	var body string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
		if code, body = probe(p.addr, "/readyz"); code == 200 {
			return nil
		}
	}
	return fmt.Errorf("/readyz %d %q", code, body)
}

// waitForService waits until the micro service answers.
func (r *run) waitForService(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := r.nc.Request("$SRV.PING."+contract.ServiceName, nil, time.Second); err == nil {
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

// chaos injects the faults, one at a time, at fixed shares of the load:
// the model down for an outage first (so that requests come a breaker
// cooldown after it), a replica killed (SIGKILL) and restarted, then the
// JetStream meta leader killed and restarted, then the leaders of shard
// 0's session data and records, of the requests and events streams and of
// the breakers bucket likewise (a node back is current before the next is
// killed: R3 loses no quorum), and the other replica paused (SIGSTOP) and
// resumed.
func (r *run) chaos(ctx context.Context) {
	at := func(frac float64) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(r.loadStart.Add(time.Duration(float64(r.o.Duration) * frac)))):
			return true
		}
	}
	if !at(0.04) {
		return
	}
	r.modelOutage(ctx)
	// A replica killed and restarted early, so that it has long served
	// again when the other is paused.
	if !at(0.14) {
		return
	}
	r.mu.Lock()
	p := r.replicas[0]
	r.mu.Unlock()
	if p != nil {
		r.lostCalls.Add(r.fp.InFlight())
		p.kill()
		r.fault("killed replica 1 (SIGKILL)")
	}
	at(0.18)
	if err := r.startReplica(0); err != nil {
		r.fault("restart replica 1 failed: %v", err)
	} else if err := r.waitReady(ctx, 0); err != nil {
		r.fault("restarted replica 1, not ready: %v", err)
	} else {
		r.fault("restarted replica 1 (ready)")
	}
	leaderOf := func(stream string) func() int { return func() int { return r.c.StreamLeader(stream) } }
	steps := []struct {
		from, to float64
		what     string
		leader   func() int
	}{
		{0.24, 0.27, "the JetStream meta leader", r.c.MetaLeader},
		{0.30, 0.33, "leader of " + kvstore.DataStream(0) + " (shard 0's session data)", leaderOf(kvstore.DataStream(0))},
		{0.36, 0.39, "leader of KV_" + kvstore.RecordsBucket(0) + " (shard 0's session records)", leaderOf("KV_" + kvstore.RecordsBucket(0))},
		{0.42, 0.45, "leader of " + consumer.RequestStream, leaderOf(consumer.RequestStream)},
		{0.48, 0.51, "leader of " + consumer.ResultStream, leaderOf(consumer.ResultStream)},
		{0.54, 0.57, "leader of KV_" + kvstore.BreakersBucket + " (the breakers)", leaderOf("KV_" + kvstore.BreakersBucket)},
	}
	for _, st := range steps {
		if !at(st.from) {
			return
		}
		r.killNode(st.what, awaitLeader(ctx, st.leader), func() { at(st.to) })
	}
	if !at(0.64) {
		return
	}
	r.pauseReplica()
}

// awaitLeader is the node leader names, polled for up to leaderWait while
// none does: a stream whose node was just restarted may be between
// leaders for a few seconds (more on a busy machine), and the fault is
// then made late rather than not at all. -1 when none leads by then.
func awaitLeader(ctx context.Context, leader func() int) int {
	deadline := time.Now().Add(leaderWait)
	for {
		l := leader()
		if l >= 0 || time.Now().After(deadline) {
			return l
		}
		select {
		case <-ctx.Done():
			return l
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leaderWait bounds awaitLeader.
const leaderWait = 10 * time.Second

// modelOutage answers every model call 503 for the outage, then lets the
// model answer again.
func (r *run) modelOutage(ctx context.Context) {
	r.fp.SetBehaviour(func(string) fakeprovider.Action { return fakeprovider.Action{Status: 503} })
	r.mu.Lock()
	r.outageStart = time.Now()
	r.mu.Unlock()
	r.fault("model outage: every call answered 503 for %v", r.o.Outage)
	select {
	case <-ctx.Done():
	case <-time.After(r.o.Outage):
	}
	r.fp.SetBehaviour(r.model())
	r.mu.Lock()
	r.outageEnd = time.Now()
	r.mu.Unlock()
	r.fault("model back")
}

// killNode kills node l (the leader of what), and restarts it once back
// returns, waiting until it is current.
func (r *run) killNode(what string, l int, back func()) {
	if l < 0 {
		r.fault("no node leads %s: not killed", what)
		return
	}
	r.fault("killed node N%d, %s", l+1, what)
	r.c.Kill(l)
	back()
	if err := r.c.Restart(l); err != nil {
		r.fault("restart N%d failed: %v", l+1, err)
		return
	}
	if err := r.c.WaitCurrent(l, 20*time.Second); err != nil {
		r.fault("%v", err)
		return
	}
	r.fault("restarted node N%d (current)", l+1)
}

// pauseReplica pauses replica 2 (SIGSTOP) for the pause, then resumes it.
func (r *run) pauseReplica() {
	r.mu.Lock()
	p := r.replicas[1]
	r.mu.Unlock()
	if p == nil {
		return
	}
	r.lostCalls.Add(r.fp.InFlight())
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	r.mu.Lock()
	r.pauseFrom = time.Now()
	r.mu.Unlock()
	r.fault("paused replica 2 (SIGSTOP) for %v", r.o.Pause)
	time.Sleep(r.o.Pause) // not cut short: a paused replica must be resumed
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	r.mu.Lock()
	r.pauseTo = time.Now()
	r.mu.Unlock()
	r.fault("resumed replica 2 (SIGCONT)")
}

func (r *run) onResult(m *nats.Msg) {
	typ := m.Header.Get("ce-type")
	if typ != contract.TypeCompactionCompleted && typ != contract.TypeCompactionFailed {
		return
	}
	var d struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(m.Data, &d)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[m.Header.Get("ce-id")]++
	r.markAnswered(d.RequestID, typ)
}

// markAnswered records request id's first result (under r.mu).
func (r *run) markAnswered(id, typ string) {
	if at, ok := r.published[id]; ok {
		if _, done := r.answered[id]; !done {
			r.answered[id] = time.Since(at)
			if typ == contract.TypeCompactionCompleted {
				r.completed[id] = true
			}
		}
	}
}

// lookup asks the service for the stored results of the requests not
// answered yet, as the clients do while they wait: a result published
// while the core subscription was reconnecting reaches no subscriber.
func (r *run) lookup(ids []string) {
	for _, id := range ids {
		r.mu.Lock()
		_, done := r.answered[id]
		sid := r.sessionOf[id]
		r.mu.Unlock()
		if done {
			continue
		}
		b, _ := json.Marshal(map[string]string{"session_id": sid, "request_id": id})
		m, err := r.nc.Request(contract.SubjectResult, b, 2*time.Second)
		if err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
			continue
		}
		var res struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(m.Data, &res) == nil && res.Type != "" {
			r.mu.Lock()
			r.markAnswered(id, res.Type)
			r.mu.Unlock()
		}
	}
}

// call makes a session request as a runtime does: the same body again on
// a retry answer or no answer, until it is answered or ctx ends.
func (r *run) call(ctx context.Context, subject string, body []byte, out any) error {
	for try := 0; ; try++ {
		m, err := r.nc.Request(subject, body, attemptTimeout)
		switch {
		case err == nil && m.Header.Get(micro.ErrorCodeHeader) == "":
			return json.Unmarshal(m.Data, out)
		case err == nil:
			var eb contract.ErrorBody
			if json.Unmarshal(m.Data, &eb) != nil || eb.Status != contract.StatusRetry {
				return fmt.Errorf("%s answered %s: %s", subject, m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader))
			}
		case !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded):
			return err
		}
		r.retries.Add(1)
		if try > 200 || ctx.Err() != nil && try > 100 {
			return fmt.Errorf("%s: no answer after %d tries", subject, try+1)
		}
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
	}
}

// turn is a runtime's exchange n: a user message and an answer.
func turn(sid string, n int) (u, a string) {
	return fmt.Sprintf("[%s turn %d] My booking REF-%s-%d: can I move the flight to day %d and keep seat %dA?", sid, n, sid, n, n%28+1, n%30+1),
		fmt.Sprintf("[%s turn %d] Booking REF-%s-%d moved to day %d; seat %dA kept; fare difference $%d.", sid, n, sid, n, n%28+1, n%30+1, 10+n%90)
}

// runtime is one agent runtime: its session, created with the turns of an
// earlier part of the conversation (about 80 % of the limit, as a runtime
// resuming one does), then a turn at a time (a user message and an answer,
// with ids), a compaction request whenever its context is over the limit,
// waiting for the result as a runtime does.
func (r *run) runtime(ctx context.Context, n int) {
	sid := fmt.Sprintf("chaos-%02d", n)
	sys := "You are a support agent for an airline. Be brief."
	msgs := []map[string]any{{"id": sid + "-sys", "role": "system", "content": sys}}
	ids := []string{sid + "-sys"}
	tokens := r.counter.Message(&session.Message{Role: session.RoleSystem, Content: session.TextContent(sys)})
	next := 0
	for ; tokens < r.o.ContextLimit*4/5; next++ {
		uText, aText := turn(sid, next)
		u, a := fmt.Sprintf("%s-u%04d", sid, next), fmt.Sprintf("%s-a%04d", sid, next)
		msgs = append(msgs, map[string]any{"id": u, "role": "user", "content": uText}, map[string]any{"id": a, "role": "assistant", "content": aText})
		ids = append(ids, u, a)
		tokens += r.counter.Message(&session.Message{Role: session.RoleUser, Content: session.TextContent(uText)}) +
			r.counter.Message(&session.Message{Role: session.RoleAssistant, Content: session.TextContent(aText)})
	}
	create, _ := json.Marshal(map[string]any{"session_id": sid, "context_limit": r.o.ContextLimit, "messages": msgs})
	var c sessions.Created
	if err := r.call(context.Background(), contract.SubjectCreate, create, &c); err != nil {
		r.fail(fmt.Errorf("%s: create: %w", sid, err))
		return
	}
	// (Not counted in the append rate: one create carries them.)
	r.mu.Lock()
	r.acked[sid] = append(r.acked[sid], ids...)
	r.mu.Unlock()
	tokens = c.Tokens
	for turnN := next; ctx.Err() == nil; turnN++ {
		u, a := fmt.Sprintf("%s-u%04d", sid, turnN), fmt.Sprintf("%s-a%04d", sid, turnN)
		uText, aText := turn(sid, turnN)
		body, _ := json.Marshal(map[string]any{"session_id": sid, "messages": []map[string]any{
			{"id": u, "role": "user", "content": uText},
			{"id": a, "role": "assistant", "content": aText}}})
		var ap sessions.Appended
		if err := r.call(context.Background(), contract.SubjectAppend, body, &ap); err != nil {
			r.fail(fmt.Errorf("%s turn %d: append: %w", sid, turnN, err))
			return
		}
		r.ack(sid, u, a)
		if ap.Status == sessions.StatusApplied {
			tokens += r.counter.Message(&session.Message{Role: session.RoleUser, Content: session.TextContent(uText)}) +
				r.counter.Message(&session.Message{Role: session.RoleAssistant, Content: session.TextContent(aText)})
		}
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
// it returns the context's tokens after a completed one. One time in five
// the runtime sends two requests at once (another id each), as a runtime
// with two threads, or a retry under a new id, does: they must compact once.
func (r *run) compact(ctx context.Context, sid string, tokens int) (int, bool) {
	ids := []string{uuid.NewString()}
	if rand.IntN(5) == 0 {
		ids = append(ids, uuid.NewString())
		r.mu.Lock()
		r.pairs = append(r.pairs, [2]string{ids[0], ids[1]})
		r.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); r.publish(sid, id, tokens) }()
	}
	wg.Wait()
	// Wait for the results as a runtime does (the load may end meanwhile:
	// the run waits for open requests after).
	for tick, deadline := 0, time.Now().Add(90*time.Second); time.Now().Before(deadline) && ctx.Err() == nil; tick++ {
		r.mu.Lock()
		done := true
		for _, id := range ids {
			_, ok := r.answered[id]
			done = done && ok
		}
		r.mu.Unlock()
		if done {
			break
		}
		if tick > 0 && tick%20 == 0 { // every second
			r.lookup(ids)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var v sessions.ContextView
	b, _ := json.Marshal(map[string]any{"session_id": sid})
	if err := r.call(context.Background(), contract.SubjectContext, b, &v); err != nil {
		return 0, false
	}
	// A completed compaction leaves the context under its limit (the
	// runtime appends nothing meanwhile).
	r.mu.Lock()
	completed := false
	for _, id := range ids {
		completed = completed || r.completed[id]
	}
	if completed {
		r.checkedLimit++
		if v.Tokens > r.o.ContextLimit {
			r.overLimit = append(r.overLimit, fmt.Sprintf("%s %d", sid, v.Tokens))
		}
	}
	r.mu.Unlock()
	return v.Tokens, true
}

// publish sends one request event, retrying the publish (the same
// Nats-Msg-Id: stored once) until the stream takes it.
func (r *run) publish(sid, id string, tokens int) {
	ev, err := events.NewEvent(id, contract.TypeContextOverBudget, "urn:chaos-runtime", sid, time.Now(),
		contract.RequestData{SessionID: sid, Model: "gpt-4o", ContextLimit: r.o.ContextLimit, RequestedTokens: tokens})
	if err != nil {
		r.fail(err)
		return
	}
	h, body := events.EncodeBinary(ev)
	r.mu.Lock()
	r.published[id] = time.Now()
	r.sessionOf[id] = sid
	r.mu.Unlock()
	for try := 0; ; try++ {
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := r.js.PublishMsg(pctx, &nats.Msg{Subject: contract.Subject(contract.TypeContextOverBudget, sid), Header: h, Data: body})
		cancel()
		if err == nil {
			return
		}
		if try > 30 {
			r.fail(fmt.Errorf("%s: publish request: %w", sid, err))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (r *run) ack(sid string, ids ...string) {
	now := time.Now()
	r.mu.Lock()
	r.acked[sid] = append(r.acked[sid], ids...)
	for range ids {
		r.ackedAt = append(r.ackedAt, now)
	}
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
	for tick := 0; time.Now().Before(deadline) && ctx.Err() == nil; tick++ {
		r.mu.Lock()
		var open []string
		for id := range r.published {
			if _, ok := r.answered[id]; !ok {
				open = append(open, id)
			}
		}
		r.mu.Unlock()
		if len(open) == 0 {
			return
		}
		if tick > 0 && tick%5 == 0 { // every second
			r.lookup(open)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// verify checks what the runtimes were told against the stores.
func (r *run) verify(ctx context.Context) (*Report, error) {
	rep := &Report{Runtimes: r.o.Runtimes, Duration: r.o.Duration, FailRate: r.o.FailRate, RateLimited: r.o.RateLimited, Hang: r.o.Hang, ContextLimit: r.o.ContextLimit,
		CallTimeout: config.Defaults().Timeout, BreakerCooldown: r.o.BreakerCooldown, Faults: r.faults, Outcomes: map[string]int{}}
	rep.AppendRetries, rep.AppendErrors = int(r.retries.Load()), int(r.errs.Load())
	r.mu.Lock()
	rep.Hostile = r.hostileRep
	rep.Hostile.Codes = maps.Clone(r.hostileRep.Codes)
	rep.ContextsChecked, rep.OverLimit = r.checkedLimit, slices.Clone(r.overLimit)
	r.mu.Unlock()
	if err := r.verifyMessages(ctx, rep); err != nil {
		return nil, err
	}
	outcome, lat, err := r.verifyResults(ctx, rep)
	if err != nil {
		return nil, err
	}
	r.verifyRates(rep, outcome)
	if err := r.verifyCalls(ctx, rep); err != nil {
		return nil, err
	}
	r.mu.Lock()
	answered, published := r.answered, maps.Clone(r.published)
	r.mu.Unlock()
	// The slowest requests, for whoever reads the replicas' logs.
	ids := slices.Collect(maps.Keys(answered))
	slices.SortFunc(ids, func(a, b string) int { return int(answered[b] - answered[a]) })
	for _, id := range ids[:min(3, len(ids))] {
		r.logf("slow request %s (%s): published at %.1fs, answered after %v", id, outcome[id], published[id].Sub(r.start).Seconds(), answered[id].Round(time.Millisecond))
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

// verifyMessages reads every session a runtime appended to and counts
// its acknowledged messages lost and any message stored twice.
func (r *run) verifyMessages(ctx context.Context, rep *Report) error {
	store, err := kvstore.NewSessions(ctx, r.nc, r.js)
	if err != nil {
		return err
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
			return fmt.Errorf("history of %s: %w", sid, herr)
		}
		byID, byText := map[string]int{}, map[string]int{}
		for _, m := range msgs {
			byID[m.ID]++
			byText[m.Text]++
			if strings.HasPrefix(m.ID, "hostile-") || strings.Contains(m.Text, "HOSTILE") {
				rep.Hostile.Stored++
			}
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

	return nil
}

// verifyResults reads the result stream: each request's one result (a
// completion stored after a retryable failure of the same request is its
// outcome), what the outage may and may not have answered, and the
// latencies; it returns each request's outcome and its answer's delay.
func (r *run) verifyResults(ctx context.Context, rep *Report) (map[string]string, []time.Duration, error) {
	// Results: the stream's, by request.
	r.mu.Lock()
	published := maps.Clone(r.published)
	answered := r.answered
	seen := r.seen
	r.mu.Unlock()
	rep.Requests = len(published)
	stored, err := r.storedResults(ctx)
	if err != nil {
		return nil, nil, err
	}
	outcome := map[string]string{}
	var lat []time.Duration
	for id := range published {
		// A completion stored after a retryable failure of the same
		// request is its outcome.
		res, ok := stored[contract.RequestResultID(id)]
		failed, twice := stored[contract.FailedResultID(id)]
		if !ok {
			res, ok = failed, twice
		} else if twice {
			rep.TwoResults++
			r.logf("request %s of %s has two results: %s and %s", id, res.session, res.outcome, failed.outcome)
		}
		if !ok {
			rep.ResultsMissing++
			continue
		}
		rep.Results++
		rep.Outcomes[res.outcome]++
		outcome[id] = res.outcome
		if !r.outageEnd.IsZero() && published[id].After(r.outageEnd.Add(r.o.BreakerCooldown)) {
			rep.AfterCooldown++
			if res.outcome == "failed: "+string(pipeline.ReasonCircuitOpen) {
				rep.LockedAfterOutage++
			}
		}
		// A summary that failed while the model was down (answered from its
		// start to a few seconds after its end: the last retries) is what
		// the outage must give; the completion goal counts the others.
		if d, ok := answered[id]; ok && res.outcome == "failed: "+string(pipeline.ReasonSummaryFailed) && !r.outageStart.IsZero() {
			at := published[id].Add(d)
			if !at.Before(r.outageStart) && at.Before(r.outageEnd.Add(outageTail)) {
				rep.FailedInOutage++
			}
		}
		if res.outcome == "compacted" {
			rep.Compactions++
		}
		if res.typ == contract.TypeCompactionCompleted {
			rep.ModelCallsNeeded += res.llmCalls
		}
		if res.strategy == "prepared" || res.strategy == "prepared_topup" {
			rep.Prepared++
		}
		if d, ok := answered[id]; ok {
			lat = append(lat, d)
		}
	}
	for id, n := range seen {
		if n > 1 {
			rep.DuplicateResults += n - 1
			r.logf("result event %s seen %d times by a core subscriber", id, n)
		}
	}
	return outcome, lat, nil
}

// verifyRates counts the pairs of requests compacted twice and the
// append rates before and during the pause.
func (r *run) verifyRates(rep *Report, outcome map[string]string) {
	r.mu.Lock()
	pairs := slices.Clone(r.pairs)
	ackedAt := slices.Clone(r.ackedAt)
	r.mu.Unlock()
	for _, p := range pairs {
		rep.Pairs++
		if outcome[p[0]] == "compacted" && outcome[p[1]] == "compacted" {
			rep.PairsBothCompacted++
		}
	}
	rate := func(from, to time.Time) float64 {
		if from.IsZero() || !to.After(from) {
			return 0
		}
		n := 0
		for _, t := range ackedAt {
			if !t.Before(from) && t.Before(to) {
				n++
			}
		}
		return float64(n) / to.Sub(from).Seconds()
	}
	rep.AppendRate = rate(r.loadStart, r.pauseFrom)
	pauseEnd := r.pauseTo
	if pauseEnd.IsZero() || pauseEnd.After(r.loadEnd) {
		pauseEnd = r.loadEnd
	}
	rep.AppendRatePaused = rate(r.pauseFrom, pauseEnd)
}

// verifyCalls counts the breakers left open and the model's calls: those
// results account for, preparations', and those in flight at the faults.
func (r *run) verifyCalls(ctx context.Context, rep *Report) error {
	breakers, err := kvstore.NewBreakers(ctx, r.nc, r.js)
	if err != nil {
		return err
	}
	list, err := breakers.List(ctx)
	if err != nil {
		return fmt.Errorf("list breakers: %w", err)
	}
	for _, b := range list {
		if b.Open() {
			rep.OpenBreakers++
		}
	}
	rep.ModelCalls, rep.ModelCallsFailed, rep.ModelCallsHung, rep.ModelCallsAnswered = r.fp.Stats()
	rep.PreparationCalls = r.fp.PreparationCalls()
	rep.ExtraCalls = rep.ModelCallsAnswered - rep.PreparationCalls - int64(rep.ModelCallsNeeded)
	rep.CallsInFlightAtFaults = r.lostCalls.Load()
	if rep.ModelCallsNeeded > 0 {
		// Duplicated work is what requests call beyond what their
		// results account for; preparations are counted apart.
		rep.CallsPerRequest = float64(rep.ModelCallsAnswered-rep.PreparationCalls) / float64(rep.ModelCallsNeeded)
	}
	return nil
}

type sessionMessage struct{ ID, Text string }

type storedResult struct {
	typ, outcome, strategy, session string
	llmCalls                        int
}

// storedResults reads every result event in COMPACTION_EVENTS by event id.
func (r *run) storedResults(ctx context.Context) (map[string]storedResult, error) {
	var err error
	for try := 0; try < 10; try++ { // the cluster may have just restarted
		var out map[string]storedResult
		if out, err = r.readResults(ctx); err == nil {
			return out, nil
		}
		r.logf("read the results: %v", err)
		time.Sleep(2 * time.Second)
	}
	return nil, err
}

// readResults reads the result stream once, through an ordered consumer,
// until it has every result the consumer counted when it was made.
func (r *run) readResults(ctx context.Context) (map[string]storedResult, error) {
	oc, err := r.js.OrderedConsumer(ctx, consumer.ResultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{contract.CompletedPrefix + ">", contract.FailedPrefix + ">"}})
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	info, err := oc.Info(ictx)
	cancel()
	if err != nil {
		return nil, err
	}
	want := info.NumPending
	out := map[string]storedResult{}
	var read uint64
	for deadline := time.Now().Add(time.Minute); read < want; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("read %d of the %d results in a minute", read, want)
		}
		batch, err := oc.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			read++
			var d struct {
				Outcome  string `json:"outcome"`
				Reason   string `json:"reason"`
				LLMCalls int    `json:"llm_calls"`
				Strategy string `json:"strategy"`
			}
			_ = json.Unmarshal(m.Data(), &d)
			typ := m.Headers().Get("ce-type")
			outcome := d.Outcome
			if typ == contract.TypeCompactionFailed {
				outcome = "failed: " + d.Reason
			}
			out[m.Headers().Get("ce-id")] = storedResult{typ: typ, outcome: outcome, strategy: d.Strategy, llmCalls: d.LLMCalls, session: m.Headers().Get("ce-subject")}
		}
	}
	return out, nil
}

// Markdown renders the report as docs/RELIABILITY.md.
func (r Report) Markdown(command string) string {
	var b bytes.Buffer
	verdict := "**Every goal met.**"
	if !r.Pass() {
		verdict = "**Goals missed: " + r.Missed() + ".**"
	}
	fmt.Fprintf(&b, "# Reliability under faults\n\nGenerated by `%s` (`make chaos`, which exits 1 when a goal is missed). %s\n\n", command, verdict)
	fmt.Fprintf(&b, "A three-node JetStream cluster in one process (R3 streams and buckets), two `compactor serve` processes (the service's defaults: model calls limited to %v and hedged, consumer ack wait %v; breaker cooldown %v), %d runtimes for %v, each creating its session with turns of an earlier part of its conversation (about 80 %% of its limit), appending a turn (two messages with their own ids) every 200-500 ms through `compactor.session.append` (waiting %v for an answer, then sending the same request again), and publishing a `ContextOverBudget` request whenever its context is over %d tokens (one time in five two at once, with two ids), then waiting for the result; beside them a hostile runtime sends, about ten times a second, input the contract refuses (%d kinds: malformed JSON, unknown fields, duplicate keys, tool calls never answered or sharing an id, a tool result with no call, an upload id beside content, unknown content parts, invalid data URLs, a 10,000-character session id, too many messages, a create over a live session) at the runtimes' sessions. The model (a local OpenAI-compatible server) fails %.0f%% of its calls with OpenAI's 500 and 503 bodies, answers %.0f%% with a 429 and `Retry-After: 1`, lets %.0f%% hang, and answers the others in 100-500 ms. Faults, one at a time, then after the load the whole cluster restarted (the in-process nodes are shut down, so their stores are flushed: a restart, not a power loss):\n\n",
		r.CallTimeout, ackWait, r.BreakerCooldown, r.Runtimes, r.Duration, attemptTimeout, r.ContextLimit, len(hostileInputs)+1, 100*r.FailRate, 100*r.RateLimited, 100*r.Hang)
	for _, f := range r.Faults {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	b.WriteString("\n| goal | met | figures |\n| --- | --- | --- |\n")
	for _, g := range r.Goals() {
		met := "yes"
		if !g.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.Name, met, g.Figures)
	}
	b.WriteString("\n| measure | value |\n| --- | --- |\n")
	row := func(k string, v any) { fmt.Fprintf(&b, "| %s | %v |\n", k, v) }
	row("appends acknowledged (messages)", r.AppendsAcknowledged)
	row("messages stored", r.MessagesStored)
	row("messages lost (acknowledged, not stored)", r.MessagesLost)
	row("messages duplicated", r.MessagesDuplicated)
	row("sessions missing messages", r.SessionsMissing)
	row(fmt.Sprintf("append answers that said retry (or none in %v)", attemptTimeout), r.AppendRetries)
	row("append errors (neither stored nor retry)", r.AppendErrors)
	row("appends per second before the pause / while a replica was paused", fmt.Sprintf("%.1f / %.1f", r.AppendRate, r.AppendRatePaused))
	row("requests", r.Requests)
	row("requests with a result in the stream", r.Results)
	row("requests without a result", r.ResultsMissing)
	row("requests sent two at once / both compacted", fmt.Sprintf("%d / %d", r.Pairs, r.PairsBothCompacted))
	row("results a core subscriber saw twice (same ce-id)", r.DuplicateResults)
	row("requests with both a completion and a failure", r.TwoResults)
	var outs []string
	for k, v := range r.Outcomes {
		outs = append(outs, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(outs)
	row("outcomes", strings.Join(outs, ", "))
	row("breakers open at the end / requests a cooldown after the outage / of them refused circuit_open", fmt.Sprintf("%d / %d / %d", r.OpenBreakers, r.AfterCooldown, r.LockedAfterOutage))
	row("model calls (all / failed or rate-limited on purpose / hung on purpose / answered)", fmt.Sprintf("%d / %d / %d / %d", r.ModelCalls, r.ModelCallsFailed, r.ModelCallsHung, r.ModelCallsAnswered))
	row("model calls made by preparations (answered)", r.PreparationCalls)
	row("results answered from a preparation", r.Prepared)
	row("model calls the results account for", r.ModelCallsNeeded)
	row("model calls per request (answered by requests ÷ accounted for)", fmt.Sprintf("%.3f", r.CallsPerRequest))
	row("model calls beyond what results account for / in flight when a replica was killed or paused", fmt.Sprintf("%d / %d", r.ExtraCalls, r.CallsInFlightAtFaults))
	var codes []string
	for k, v := range r.Hostile.Codes {
		if k == "" {
			k = "accepted"
		}
		codes = append(codes, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(codes)
	row("hostile inputs sent / answered", fmt.Sprintf("%d / %s", r.Hostile.Sent, strings.Join(codes, ", ")))
	row("whole-cluster restart: /livez after a replica's start / leaders after the nodes' start / replicas ready after the leaders",
		fmt.Sprintf("%v / %v / %v", r.Restart.LivezAfter.Round(time.Millisecond), r.Restart.LeadersAfter.Round(100*time.Millisecond), r.Restart.ServingAfter.Round(100*time.Millisecond)))
	row(fmt.Sprintf("full store (max_file_store %d MiB): appends stored / the refusal / its time", fullStoreBytes>>20),
		fmt.Sprintf("%d / %s %s / %v", r.FullStore.Acknowledged, r.FullStore.Code, r.FullStore.Status, r.FullStore.RefusedIn.Round(time.Millisecond)))
	row("full store: appends passing again after the delete", r.FullStore.ResumedIn.Round(time.Millisecond))
	row("request to result, p50 / p99 / max", fmt.Sprintf("%v / %v / %v", r.LatencyP50.Round(time.Millisecond), r.LatencyP99.Round(time.Millisecond), r.LatencyMax.Round(time.Millisecond)))
	fmt.Fprintf(&b, "\nHow each figure is found: every message a runtime was told is stored (applied or already stored) is looked up by id in its session's history afterwards; a message stored twice would show as the same id or the same text twice. Results are read from `COMPACTION_EVENTS` by the result ids derived from each request id. A runtime waiting for a result also asks `compactor.result.get` every second, as the clients do: a result published while its core subscription was reconnecting reaches no subscriber. A request with both a completion and a failure stored would have two different results. A core subscriber on `compaction.>` counts every publish: JetStream's dedup keeps the stream to one event per id, and a request delivered again reads the stream first and answers nothing again, but a publish whose acknowledgement never came (the stream's leader away) may have reached core subscribers without being stored, and is sent again: a subscriber sees that result twice under one `ce-id`, which it deduplicates by. The hostile messages carry ids and text of their own: any found in a session afterwards was stored. The whole-cluster restart probes each replica's `/livez` and `/readyz` from its process's start and each stream's leader on the nodes. The full store is a node of its own at its `max_file_store`, with one replica: sessions are appended to until an append is refused, then one is deleted. Answered model calls, less those made by preparations (they say so in the `X-Compactor-Purpose` header), are compared with the `llm_calls` of the completed results: a request worked on twice (a redelivery of work still in progress) would call the model twice for one result. The p99 includes the requests a killed or paused replica held: they are delivered again after the consumer's ack wait (%v). A paused replica's connection is dropped by the servers after it misses their pings (every %v, %d missed), so the endpoint requests it would take go to the other.\n",
		ackWait, embedded.StalePingInterval, embedded.StaleMaxPings)
	return b.String()
}
