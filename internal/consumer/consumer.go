package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/tenant"
)

// Options tune a Consumer. The zero value works.
type Options struct {
	// Workers bounds the requests this process holds at once (default
	// 64): each is running, or waiting behind the running one of its
	// session, and every one gets InProgress heartbeats. Nothing is pulled
	// beyond it (no prefetch that could sit unattended past AckWait). A
	// compaction mostly waits on its model call (I/O), so this is far more
	// than the cores: one slow or hanging call holds one of them, not the
	// others' sessions.
	Workers int
	// Source is the CloudEvents source of published events.
	Source string
	Logger *slog.Logger
	// RetryDelay is how long a request that failed transiently waits
	// before its next delivery, by deliveries so far (default: 1 s, 5 s,
	// 30 s, 2 min, with jitter).
	RetryDelay func(delivered uint64) time.Duration
	// ShutdownGrace is how long running compactions may finish once Run's
	// context is cancelled before they are cancelled and released to
	// another replica (default 10 s).
	ShutdownGrace time.Duration
	// PullExpiry of the consumer's pull requests (default 5 s).
	PullExpiry time.Duration
	// Observe, when set, is called with every request's result (not with
	// work released at shutdown), for metrics.
	Observe func(*pipeline.Result)
	// NearBudget, when set, is handed every ContextNearBudget (a hint to
	// prepare the session's next compaction: no result event); it must
	// not block. Without it the hints are acknowledged and ignored.
	NearBudget func(context.Context, pipeline.Request)
}

// Stats are a Consumer's counters since it started.
type Stats struct {
	Received     int64 `json:"received"`
	Completed    int64 `json:"completed"`
	Failed       int64 `json:"failed"`
	Retried      int64 `json:"retried"`
	DeadLettered int64 `json:"dead_lettered"`
	// DeadLetteredBy breaks DeadLettered down by reason: invalid_request
	// (it could not be decoded, or the pipeline refused it),
	// corrupt_session, or max_deliveries (a transient failure on its last
	// delivery).
	DeadLetteredBy map[string]int64 `json:"dead_lettered_by,omitempty"`
	Released       int64            `json:"released"`
	InFlight       int64            `json:"in_flight"`
	// Hints are the ContextNearBudget events received (no result event).
	Hints int64 `json:"near_budget_hints"`
}

// Consumer runs the pipeline for the requests of the durable consumer
// compactor on AGENT_CONTEXT. Work for one session runs one request at a
// time, in delivery order; different sessions run in parallel up to
// Options.Workers. Every request ends in exactly one of: a result event
// then an ack; a delayed redelivery (transient failure, no event); a copy
// in COMPACTION_DLQ then a termination (it can never be processed, or its
// deliveries ran out, in which case a CompactionFailed is published too).
type Consumer struct {
	js    jetstream.JetStream
	svc   *pipeline.Service
	pub   *events.Publisher
	opt   Options
	log   *slog.Logger
	maxNC int // the connection's max payload

	ackWait    time.Duration
	maxDeliver int

	mu       sync.Mutex
	queues   map[string][]*delivery // per session: the running one first
	held     map[*delivery]struct{} // pulled and not yet answered
	stopping bool
	freed    chan struct{} // a held delivery was answered
	// work answers one delivery (c.handle; tests replace it).
	work func(context.Context, *delivery)

	wg sync.WaitGroup

	received, completed, failed, retried, dead, released, inflight, hints atomic.Int64
	deadBy                                                                map[string]int64 // under mu
	consuming                                                             atomic.Bool
}

// Consuming reports whether the consumer is bound and its last pull
// worked: the service takes requests (readiness).
func (c *Consumer) Consuming() bool { return c.consuming.Load() }

type delivery struct {
	msg       jetstream.Msg
	tenant    string // from the subject, as the server wrote it
	sessionID string // from the subject; data decides
	// received is when it was pulled; lapsed says a heartbeat of it
	// failed. Either past the ack wait, it may have been delivered again
	// meanwhile (this process paused, its heartbeats stopped).
	received time.Time
	lapsed   atomic.Bool
}

// mayOverlap reports whether another delivery of d's request may have run
// beside it: held past the ack wait (the process paused, say), or a
// heartbeat that failed.
func (d *delivery) mayOverlap(ackWait time.Duration) bool {
	return d.lapsed.Load() || ackWait > 0 && time.Since(d.received) >= ackWait
}

// key names the delivery's session among the consumer's queues.
func (d *delivery) key() string { return tenant.Key(d.tenant, d.sessionID) }

// New returns a consumer running svc's pipeline on the requests of js,
// publishing its events there.
func New(nc *nats.Conn, js jetstream.JetStream, svc *pipeline.Service, opt Options) *Consumer {
	if opt.Workers <= 0 {
		opt.Workers = DefaultWorkers
	}
	if opt.RetryDelay == nil {
		opt.RetryDelay = DefaultRetryDelay
	}
	if opt.ShutdownGrace <= 0 {
		opt.ShutdownGrace = 10 * time.Second
	}
	if opt.PullExpiry <= 0 {
		opt.PullExpiry = 5 * time.Second
	}
	log := opt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Consumer{js: js, svc: svc, pub: &events.Publisher{JS: js, Source: opt.Source, Stream: ResultStream}, opt: opt, log: log,
		maxNC: int(nc.MaxPayload()), queues: map[string][]*delivery{}, held: map[*delivery]struct{}{}, deadBy: map[string]int64{},
		freed: make(chan struct{}, 1)}
	c.work = c.handle
	return c
}

// DefaultWorkers is how many requests a process holds at once by default.
const DefaultWorkers = 64

// DefaultRetryDelay spaces the redeliveries of transient failures: about
// 1 s, 2 s, 5 s, then 10 s, each ±20 %. A leader election heals in
// seconds: a storage blip at a request's fourth delivery cost a 2-minute
// wait when the steps grew to 2 minutes (one request took 153 s); a store
// down longer than the deliveries last is answered persist_failed at the
// last one.
func DefaultRetryDelay(delivered uint64) time.Duration {
	steps := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second}
	d := steps[min(int(max(delivered, 1))-1, len(steps)-1)]
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// InFlight is how many requests are being worked on now.
func (c *Consumer) InFlight() int64 { return c.inflight.Load() }

// Stats returns the counters.
func (c *Consumer) Stats() Stats {
	c.mu.Lock()
	by := maps.Clone(c.deadBy)
	c.mu.Unlock()
	return Stats{Received: c.received.Load(), Completed: c.completed.Load(), Failed: c.failed.Load(),
		Retried: c.retried.Load(), DeadLettered: c.dead.Load(), DeadLetteredBy: by, Released: c.released.Load(), InFlight: c.inflight.Load(), Hints: c.hints.Load()}
}

// Run consumes until ctx is cancelled, then shuts down cleanly: it stops
// pulling, releases requests not started (redelivered at once, to another
// replica), lets running compactions finish within ShutdownGrace and
// releases those that do not. It returns nil after a cancelled ctx, and an
// error when consuming cannot go on (the connection closed, the consumer
// deleted).
func (c *Consumer) Run(ctx context.Context) error {
	cons, err := c.bind(ctx)
	if err != nil || cons == nil { // nil: ctx ended first
		return err
	}
	cfg := cons.CachedInfo().Config
	c.ackWait, c.maxDeliver = cfg.AckWait, cfg.MaxDeliver

	// Work runs under its own context: cancelled only when the grace
	// period after ctx's cancellation is over.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	hbDone := make(chan struct{})
	go c.heartbeat(work, hbDone)

	c.consuming.Store(true)
	perr := c.pull(ctx, work, cons)
	c.consuming.Store(false)

	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(c.opt.ShutdownGrace):
		c.log.Warn("shutdown grace over: cancelling running compactions", slog.Int64("in_flight", c.inflight.Load()))
		cancelWork()
		<-done
	}
	cancelWork()
	<-hbDone
	return perr
}

// bind binds the durable consumer. A consumer with no leader yet (a
// cluster restarting) answers nothing or 503: it is asked again until it
// answers or ctx ends; only a consumer or stream that is not there is an
// error.
func (c *Consumer) bind(ctx context.Context) (jetstream.Consumer, error) {
	delay := 250 * time.Millisecond
	for {
		cons, err := c.js.Consumer(ctx, RequestStream, Durable)
		switch {
		case err == nil:
			return cons, nil
		case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrStreamNotFound):
			return nil, fmt.Errorf("bind consumer %s on %s (provision first): %w", Durable, RequestStream, err)
		case ctx.Err() != nil:
			return nil, nil
		}
		c.log.Warn("consumer not available yet; binding again", slog.String("consumer", RequestStream+"/"+Durable), slog.String("error", err.Error()))
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// pull fetches deliveries and hands them to their sessions' queues. It asks
// the server only for as many as it has room for (Workers less those held),
// so every delivery it has is held and kept alive by the heartbeat: none
// waits in a client buffer past AckWait to be redelivered to another
// replica while this one still means to work on it.
func (c *Consumer) pull(ctx, work context.Context, cons jetstream.Consumer) error {
	for {
		c.mu.Lock()
		free := c.opt.Workers - len(c.held)
		c.mu.Unlock()
		if free <= 0 {
			select {
			case <-c.freed:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		fctx, cancel := context.WithTimeout(ctx, c.opt.PullExpiry)
		batch, err := cons.Fetch(free, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound):
				return fmt.Errorf("consume %s: %w", Durable, err)
			}
			c.consuming.Store(false)
			c.log.Warn("pull", slog.String("error", err.Error()))
			sleep(ctx, 250*time.Millisecond)
			continue
		}
		c.consuming.Store(true)
		for msg := range batch.Messages() {
			if ctx.Err() != nil { // shutting down: not started, so released
				c.release(msg)
				continue
			}
			c.hold(work, msg)
		}
		cancel()
		if err := batch.Error(); err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, nats.ErrConnectionClosed) {
				return fmt.Errorf("consume %s: %w", Durable, err)
			}
			c.log.Warn("pull", slog.String("error", err.Error()))
			sleep(ctx, 250*time.Millisecond)
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// hold queues a delivery behind its session's running one, starting the
// session's runner when it has none.
func (c *Consumer) hold(work context.Context, msg jetstream.Msg) {
	c.received.Add(1)
	t, rest, _ := tenant.Split(msg.Subject())
	_, sid, _ := contract.RequestSubject(rest)
	d := &delivery{msg: msg, tenant: t, sessionID: sid, received: time.Now()}
	key := d.key()
	c.mu.Lock()
	q := c.queues[key]
	c.queues[key] = append(q, d)
	c.held[d] = struct{}{}
	c.mu.Unlock()
	if len(q) == 0 { // no queue: no runner
		c.wg.Add(1)
		go c.runSession(work, key)
	}
}

// release hands a delivery back for immediate redelivery.
func (c *Consumer) release(msg jetstream.Msg) {
	c.released.Add(1)
	if err := msg.Nak(); err != nil {
		c.log.Warn("release", slog.String("error", err.Error()))
	}
}

// runSession works through one session's queue (its delivery key), one
// delivery at a time.
// A session has a queue in c.queues exactly while its runner runs: the
// runner removes the queue in the same lock as it takes its last
// delivery off, so that hold, finding none, starts the only next runner.
func (c *Consumer) runSession(work context.Context, sid string) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		d, stopping := c.queues[sid][0], c.stopping
		c.mu.Unlock()
		if stopping || work.Err() != nil {
			c.release(d.msg)
		} else {
			c.inflight.Add(1)
			c.work(work, d)
			c.inflight.Add(-1)
		}
		c.mu.Lock()
		rest := c.queues[sid][1:]
		if len(rest) == 0 {
			delete(c.queues, sid)
		} else {
			c.queues[sid] = rest
		}
		delete(c.held, d)
		c.mu.Unlock()
		select {
		case c.freed <- struct{}{}:
		default:
		}
		if len(rest) == 0 {
			return
		}
	}
}

// heartbeat keeps every held delivery alive (running or waiting behind its
// session's running one) with InProgress at a third of AckWait.
func (c *Consumer) heartbeat(work context.Context, done chan<- struct{}) {
	defer close(done)
	every := max(c.ackWait/3, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-work.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		held := make([]*delivery, 0, len(c.held))
		for d := range c.held {
			held = append(held, d)
		}
		c.mu.Unlock()
		for _, d := range held {
			if err := d.msg.InProgress(); err != nil && !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
				d.lapsed.Store(true)
			}
		}
	}
}

// handle answers one delivery, by the rule of events.Dispose.
func (c *Consumer) handle(ctx context.Context, d *delivery) {
	msg := d.msg
	md, err := msg.Metadata()
	if err != nil {
		c.log.Error("delivery without metadata", slog.String("subject", msg.Subject()), slog.String("error", err.Error()))
		_ = msg.Term()
		return
	}
	t, subject, ok := tenant.Split(msg.Subject())
	if !ok {
		c.reject(ctx, d, md, pipeline.Request{}, fmt.Errorf("%w: subject %q names no valid tenant", pipeline.ErrInvalidRequest, msg.Subject()))
		return
	}
	ctx = tenant.With(ctx, t)
	req, ev, err := events.DecodeRequest(subject, msg.Headers(), msg.Data())
	ctx, span := startSpan(ctx, msg, md, subject, ev, err)
	defer span.End()
	if err != nil {
		telemetry.Fail(span, err)
		c.reject(ctx, d, md, req, err)
		return
	}
	log := c.log.With(slog.String("tenant", t), slog.String("session_id", req.SessionID), slog.String("request_id", req.ID), slog.Uint64("delivery", md.NumDelivered))
	if req.Trigger == pipeline.TriggerNearBudget {
		// A hint, not a request: handed to the preparer, answered by
		// the over-budget request it prepares for.
		if c.opt.NearBudget != nil {
			c.opt.NearBudget(ctx, req)
		}
		c.hints.Add(1)
		c.ack(log, msg)
		return
	}

	last := c.maxDeliver > 0 && int(md.NumDelivered) >= c.maxDeliver
	if (md.NumDelivered > 1 || d.mayOverlap(c.ackWait)) && c.answeredBefore(ctx, log, msg, md, req, last) {
		return
	}
	res, cerr := c.svc.Compact(ctx, req)
	telemetry.Fail(span, cerr)
	interrupted := cerr != nil && ctx.Err() != nil
	disp := events.Dispose(res, interrupted, last)
	if interrupted {
		// Shutting down: the work is not this replica's any more.
		log.Info("released at shutdown", slog.String("error", cerr.Error()))
		c.release(msg)
		return
	}
	if c.opt.Observe != nil {
		c.opt.Observe(res)
	}
	if disp != events.Retry { // a retry says so below
		pipeline.LogResult(ctx, c.log, res)
	}
	if disp == events.Retry {
		delay := c.opt.RetryDelay(md.NumDelivered)
		log.Warn("transient failure, retrying", slog.String("reason", string(res.Reason)), slog.String("error", res.Error), slog.Duration("delay", delay))
		c.retried.Add(1)
		if err := msg.NakWithDelay(delay); err != nil {
			log.Warn("nak", slog.String("error", err.Error()))
		}
		return
	}
	c.settle(ctx, log, d, md, req, res, disp)
}

// startSpan starts the CONSUMER span of a delivery, the child of the
// request's trace (the event's traceparent, else the NATS headers').
func startSpan(ctx context.Context, msg jetstream.Msg, md *jetstream.MsgMetadata, subject string, ev cloudevents.Event, decodeErr error) (context.Context, trace.Span) {
	tr := events.TraceOf(ev)
	if decodeErr != nil || tr.Parent == "" {
		tr = events.TraceFromHeader(msg.Headers())
	}
	ctx = events.WithTrace(ctx, tr)
	template := subject
	if route, _, ok := contract.RequestSubject(subject); ok {
		template = route.Prefix + "{session_id}"
	}
	return telemetry.Tracer().Start(ctx, "process "+template, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", template), attribute.String("messaging.consumer.group.name", Durable),
			attribute.Int64("messaging.nats.delivery", int64(md.NumDelivered)), attribute.String("cloudevents.event_id", ev.ID()),
			attribute.String("cloudevents.event_source", ev.Source()), attribute.String("cloudevents.event_type", ev.Type())))
}

// settle ends a delivery whose result is final (disp is Answer or
// Reject): the result event published once (unless another delivery's
// stands), then the ack, or the dead letter.
func (c *Consumer) settle(ctx context.Context, log *slog.Logger, d *delivery, md *jetstream.MsgMetadata, req pipeline.Request, res *pipeline.Result, disp events.Disposition) {
	msg := d.msg
	reason, class := res.Error, string(res.Reason)
	switch {
	case disp == events.Reject && res.Retryable:
		// The last delivery of a transient failure: the runtime is
		// answered, the request kept.
		reason, class = fmt.Sprintf("max deliveries (%d): %s: %s", md.NumDelivered, res.Reason, res.Error), "max_deliveries"
		res.Error = fmt.Sprintf("gave up after %d deliveries: %s", md.NumDelivered, res.Error)
	case res.Reason != pipeline.ReasonInvalidRequest:
		reason = fmt.Sprintf("%s: %s", res.Reason, res.Error)
	}
	// A request delivered again may have been answered by a replica that
	// died before acknowledging it; one held past the ack wait by a replica
	// paused meanwhile, by the replica it was delivered to again. Its
	// first result stands, of either kind.
	again := md.NumDelivered > 1 || res.Strategy == pipeline.StrategyRedelivered || d.mayOverlap(c.ackWait)
	if again {
		stored, err := c.pub.Answered(ctx, req.SessionID, req.ID, md.Timestamp.Add(-answeredSkew))
		if err == nil && stored != nil && stored.Failed != res.Failed {
			log.Warn("answered meanwhile by another delivery: its result stands, this one is not published", slog.Bool("stored_failed", stored.Failed), slog.Bool("failed", res.Failed))
			if stored.Failed {
				c.failed.Add(1)
			} else {
				c.completed.Add(1)
			}
			c.ack(log, msg)
			return
		}
	}
	if err := c.pub.Once(ctx, res, again); err != nil {
		c.retryPublish(log, msg, err)
		return
	}
	if res.Failed {
		c.failed.Add(1)
	} else {
		c.completed.Add(1)
	}
	if disp == events.Reject {
		c.deadLetter(ctx, d, md, req.ID, class, reason)
		return
	}
	c.ack(log, msg)
}

// answeredSkew is how much earlier than its request a result may be
// stamped (the two streams' leaders' clocks).
const answeredSkew = time.Minute

// answeredBefore handles a request delivered again that was answered
// already (its acknowledgement lost in a leader change, or its replica
// killed after publishing): it is acknowledged, and nothing is done or
// published again, whichever kind its result was. It reports whether it
// took the delivery (answered before, or redelivered later because the
// result stream could not be read: working on it then might give it a
// second, different result). The last delivery is worked on anyway: a
// request is never left without a result.
func (c *Consumer) answeredBefore(ctx context.Context, log *slog.Logger, msg jetstream.Msg, md *jetstream.MsgMetadata, req pipeline.Request, last bool) bool {
	stored, err := c.pub.Answered(ctx, req.SessionID, req.ID, md.Timestamp.Add(-answeredSkew))
	switch {
	case err != nil && !last:
		delay := c.opt.RetryDelay(md.NumDelivered)
		log.Warn("cannot read whether the request was answered, retrying", slog.String("error", err.Error()), slog.Duration("delay", delay))
		c.retried.Add(1)
		if err := msg.NakWithDelay(delay); err != nil {
			log.Warn("nak", slog.String("error", err.Error()))
		}
		return true
	case stored != nil:
		log.Info("answered before: acknowledged again", slog.Bool("failed", stored.Failed))
		if stored.Failed {
			c.failed.Add(1)
		} else {
			c.completed.Add(1)
		}
		c.ack(log, msg)
		return true
	}
	return false
}

// retryPublish redelivers a request whose result could not be published:
// the compaction is committed, so the redelivery answers from it.
func (c *Consumer) retryPublish(log *slog.Logger, msg jetstream.Msg, err error) {
	log.Warn("result not published, redelivering", slog.String("error", err.Error()))
	c.retried.Add(1)
	if err := msg.NakWithDelay(time.Second); err != nil {
		log.Warn("nak", slog.String("error", err.Error()))
	}
}

func (c *Consumer) ack(log *slog.Logger, msg jetstream.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
	defer cancel()
	// The server confirms the ack; if the confirmation is lost, the
	// redelivery answers from the stored compaction and the result's id
	// makes its publish a duplicate.
	if err := msg.DoubleAck(ctx); err != nil {
		log.Warn("ack", slog.String("error", err.Error()))
	}
}

// publishTimeout bounds a dead letter's publish and a request's ack.
const publishTimeout = 10 * time.Second

// DLQ headers on a dead letter (beside the original's own headers).
const (
	HeaderReason     = "Compactor-Dlq-Reason"
	HeaderSubject    = "Compactor-Dlq-Subject"
	HeaderStreamSeq  = "Compactor-Dlq-Stream-Seq"
	HeaderDeliveries = "Compactor-Dlq-Deliveries"
	HeaderRequestID  = "Compactor-Dlq-Request-Id"
	HeaderTruncated  = "Compactor-Dlq-Truncated"
)

// reject answers a request that cannot be decoded: when it names an id
// and a session (the subject's), the runtime waiting for it gets its
// CompactionFailed (invalid_request, with the reason); then the request
// is dead-lettered. A result that cannot be published redelivers the
// request: it is answered, or dead-lettered, later.
// Every rejected request counts as failed (invalid_request) in what
// Observe sees, answered or not, so a dashboard of failures shows it.
func (c *Consumer) reject(ctx context.Context, d *delivery, md *jetstream.MsgMetadata, req pipeline.Request, err error) {
	res := &pipeline.Result{RequestID: req.ID, SessionID: req.SessionID, Tenant: tenant.From(ctx), Trigger: req.Trigger, Failed: true,
		Reason: pipeline.ReasonInvalidRequest, Error: err.Error()}
	if req.ID != "" && req.SessionID != "" {
		if perr := c.pub.Once(ctx, res, md.NumDelivered > 1); perr != nil {
			c.retryPublish(c.log.With(slog.String("session_id", req.SessionID), slog.String("request_id", req.ID)), d.msg, perr)
			return
		}
		c.failed.Add(1)
	}
	if c.opt.Observe != nil {
		c.opt.Observe(res)
	}
	c.deadLetter(ctx, d, md, req.ID, string(pipeline.ReasonInvalidRequest), err.Error())
}

// deadLetter copies a request that will never be processed to
// compactor.dlq.<session_id> with the reason, then terminates it. When
// the copy cannot be written the request is redelivered instead: nothing
// is lost.
func (c *Consumer) deadLetter(ctx context.Context, d *delivery, md *jetstream.MsgMetadata, requestID, class, reason string) {
	msg := d.msg
	sid := d.sessionID
	if !contract.ValidSessionID(sid) {
		sid = "_invalid"
	}
	out := nats.NewMsg(tenant.Subject(d.tenant, contract.DLQPrefix+sid))
	for k, v := range msg.Headers() {
		if !strings.HasPrefix(strings.ToLower(k), "nats-") {
			out.Header[k] = v
		}
	}
	out.Header.Set(HeaderReason, events.HeaderValue(reason))
	out.Header.Set(HeaderSubject, events.HeaderValue(msg.Subject()))
	out.Header.Set(HeaderStreamSeq, strconv.FormatUint(md.Sequence.Stream, 10))
	out.Header.Set(HeaderDeliveries, strconv.FormatUint(md.NumDelivered, 10))
	if requestID != "" {
		out.Header.Set(HeaderRequestID, events.HeaderValue(requestID))
	}
	out.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("dlq-%s-%d", md.Stream, md.Sequence.Stream))
	out.Data = msg.Data()
	if room := c.maxNC - 8<<10; len(out.Data) > room { // headers and framing
		out.Header.Set(HeaderTruncated, strconv.Itoa(len(out.Data)))
		out.Data = out.Data[:max(room, 0)]
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if _, err := c.js.PublishMsg(pctx, out); err != nil {
		c.log.Error("dead letter not written, redelivering", slog.String("subject", msg.Subject()), slog.String("error", err.Error()))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	c.dead.Add(1)
	c.mu.Lock()
	c.deadBy[class]++
	c.mu.Unlock()
	c.log.Warn("dead-lettered", slog.String("subject", msg.Subject()), slog.Uint64("stream_seq", md.Sequence.Stream), slog.String("reason", reason))
	if err := msg.TermWithReason(events.HeaderValue(reason)); err != nil {
		c.log.Warn("term", slog.String("error", err.Error()))
	}
}
