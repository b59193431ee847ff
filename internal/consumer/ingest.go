package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tenant"
)

// IngestQueue is the queue group of the replicas' ingest subscriptions:
// one replica stores each tenant's request.
const IngestQueue = "compactor-ingest"

// ingestTimeout bounds storing one request.
const ingestTimeout = 10 * time.Second

// maxIngesting bounds the requests one replica stores at once.
const maxIngesting = 64

// Ingest stores tenants' request events in AGENT_CONTEXT. A tenant's
// request comes through its import on
// tenant.<account>.compactor.request.<request subject> (the server wrote
// the account), and is stored under tenant.<account>.<request subject>
// with a Nats-Msg-Id of the tenant's own (<account>:<id>): AGENT_CONTEXT
// deduplicates by that id across every tenant, so two tenants' requests
// of one id would otherwise be taken for one. The answer is JetStream's
// own acknowledgement, relayed, so a runtime's JetStream publish works
// unchanged through its import (a duplicate says so; an error is
// JetStream's error object). The default tenant publishes to the stream
// directly.
type Ingest struct {
	nc    *nats.Conn
	admit Admission // nil: no quotas
	log   *slog.Logger
	sub   *nats.Subscription
	sem   chan struct{} // bounds the requests being stored

	mu      sync.Mutex
	stopped bool
	wg      sync.WaitGroup
	serial  map[string]*serial // per bounded tenant
}

// serialize holds the lock of t, a tenant with a concurrent_compactions
// quota of limit, until the returned func is called. With limit of its
// requests waiting already it answers false: they could not all be let
// in, and a flood must not take every ingest slot from the other tenants.
func (in *Ingest) serialize(t string, limit int) (func(), bool) {
	in.mu.Lock()
	l := in.serial[t]
	if l == nil {
		l = &serial{}
		in.serial[t] = l
	}
	if l.waiting >= limit {
		in.mu.Unlock()
		return nil, false
	}
	l.waiting++
	in.mu.Unlock()
	l.mu.Lock()
	in.mu.Lock()
	l.waiting--
	in.mu.Unlock()
	return l.mu.Unlock, true
}

// serial orders one tenant's requests in this replica.
type serial struct {
	mu      sync.Mutex
	waiting int // under Ingest.mu
}

// Admission answers a tenant's request quotas (quota.Quotas).
type Admission interface {
	// Rate takes one request of t's rate (no I/O).
	Rate(t string) error
	// Queue answers t's quotas of what one more request adds to: its
	// requests stored and not answered, its model use this hour.
	Queue(ctx context.Context, t string) error
	// Bounded is t's concurrent_compactions quota (0: none): a replica
	// stores such a tenant's requests one at a time, each admitted on
	// the count that includes the one before.
	Bounded(t string) int
}

// StartIngest subscribes the replica to every tenant's requests; admit,
// when set, answers their quotas (a request over one of its tenant's is
// refused with 429 quota_exceeded and not stored).
func StartIngest(nc *nats.Conn, admit Admission, log *slog.Logger) (*Ingest, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	in := &Ingest{nc: nc, admit: admit, log: log, sem: make(chan struct{}, maxIngesting), serial: map[string]*serial{}}
	sub, err := nc.QueueSubscribe(tenant.Wildcard(events.IngestPrefix+">"), IngestQueue, func(m *nats.Msg) {
		in.mu.Lock()
		if in.stopped {
			in.mu.Unlock()
			return // not stored, not answered: the runtime's publish times out and is made again
		}
		in.wg.Add(1)
		in.mu.Unlock()
		in.sem <- struct{}{}
		go func() {
			defer func() { <-in.sem; in.wg.Done() }()
			in.store(m)
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe to tenants' requests: %w", err)
	}
	in.sub = sub
	return in, nil
}

// Stop stops taking requests; those being stored are answered. It is
// safe to call more than once.
func (in *Ingest) Stop() {
	in.mu.Lock()
	in.stopped = true
	in.mu.Unlock()
	_ = in.sub.Unsubscribe()
	in.wg.Wait()
}

func (in *Ingest) store(m *nats.Msg) {
	t, rest, err := tenant.Of(m.Subject, m.Header.Get(tenant.RequestInfoHeader))
	if errors.Is(err, tenant.ErrNotCaller) {
		in.log.Warn("request event refused", slog.String("subject", m.Subject), slog.String("error", err.Error()))
		in.refuse(m, 403, err.Error())
		return
	}
	subject, found := strings.CutPrefix(rest, events.IngestPrefix)
	if err != nil || !found || t == tenant.Default {
		in.refuse(m, 400, fmt.Sprintf("subject %q names no tenant's request", m.Subject))
		return
	}
	route, _, ok := contract.RequestSubject(subject)
	if !ok {
		in.refuse(m, 400, fmt.Sprintf("%q is not a request subject (agent.context.<type>.<session_id>)", subject))
		return
	}
	if in.admit != nil && route.Trigger != pipeline.TriggerNearBudget { // a hint is no request
		err := in.admit.Rate(t)
		if n := in.admit.Bounded(t); err == nil && n > 0 {
			unlock, ok := in.serialize(t, n)
			if !ok {
				err = &tenant.QuotaError{Tenant: t, Quota: tenant.QuotaConcurrentCompactions, Limit: float64(n), RetryAfter: time.Second}
			} else {
				defer unlock()
			}
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), ingestTimeout)
			err = in.admit.Queue(ctx, t)
			cancel()
		}
		if err != nil {
			code := 503
			if errors.As(err, new(*tenant.QuotaError)) {
				code = 429
			}
			in.log.Info("request event refused", slog.String("tenant", t), slog.String("subject", subject), slog.String("error", err.Error()))
			in.refuse(m, code, err.Error())
			return
		}
	}
	out := nats.NewMsg(tenant.Subject(t, subject))
	for k, v := range m.Header {
		if k != tenant.RequestInfoHeader {
			out.Header[k] = v
		}
	}
	if id := m.Header.Get(jetstream.MsgIDHeader); id != "" {
		out.Header.Set(jetstream.MsgIDHeader, tenant.MsgID(t, id))
	}
	out.Data = m.Data
	ack, err := in.nc.RequestMsg(out, ingestTimeout)
	if err != nil {
		in.log.Warn("request event not stored", slog.String("tenant", t), slog.String("subject", subject), slog.String("error", err.Error()))
		in.refuse(m, 503, "the request could not be stored ("+err.Error()+"): publish it again")
		return
	}
	if m.Reply != "" {
		if err := m.Respond(tenantAck(ack.Data)); err != nil {
			in.log.Warn("respond", slog.String("subject", m.Reply), slog.String("error", err.Error()))
		}
	}
}

// tenantAck is JetStream's acknowledgement as a tenant sees it: the stream
// and whether the request was a duplicate, without the stream's sequence,
// which counts every tenant's requests (the others' request rate).
// JetStream's error answer goes as it is.
func tenantAck(b []byte) []byte {
	var ack struct {
		Stream    string          `json:"stream"`
		Domain    string          `json:"domain,omitempty"`
		Duplicate bool            `json:"duplicate,omitempty"`
		Error     json.RawMessage `json:"error,omitempty"`
	}
	if json.Unmarshal(b, &ack) != nil || ack.Error != nil || ack.Stream == "" {
		return b
	}
	out, _ := json.Marshal(ack)
	return out
}

// refuse answers as JetStream answers a publish it refuses.
func (in *Ingest) refuse(m *nats.Msg, code int, desc string) {
	if m.Reply == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": code, "description": desc}})
	if err := m.Respond(b); err != nil {
		in.log.Warn("respond", slog.String("subject", m.Reply), slog.String("error", err.Error()))
	}
}

// Backlog counts a tenant's requests that AGENT_CONTEXT holds (a work
// queue: stored and not yet answered, waiting or running), hints left out:
// the stream's count of each subject under the tenant's, from one stream
// info request.
func Backlog(js jetstream.JetStream) func(ctx context.Context, t string) (int, error) {
	var mu sync.Mutex
	var st jetstream.Stream
	return func(ctx context.Context, t string) (int, error) {
		mu.Lock()
		s := st
		mu.Unlock()
		if s == nil {
			var err error
			if s, err = js.Stream(ctx, RequestStream); err != nil {
				return 0, fmt.Errorf("count the requests of tenant %s: %w", t, err)
			}
			mu.Lock()
			st = s
			mu.Unlock()
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(tenant.Subject(t, RequestSubject)))
		if err != nil {
			return 0, fmt.Errorf("count the requests of tenant %s: %w", t, err)
		}
		n := 0
		hints := tenant.Subject(t, contract.NearBudgetPrefix)
		for subj, c := range info.State.Subjects {
			if !strings.HasPrefix(subj, hints) {
				n += int(c)
			}
		}
		return n, nil
	}
}
