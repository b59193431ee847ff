package consumer_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/schemas"
)

// env is an embedded server with everything provisioned.
type env struct {
	t        *testing.T
	srv      *server.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	store    *kvstore.Sessions
	breakers *kvstore.Breakers
	counter  *tokens.Counter
}

const testAckWait = 2 * time.Second

func newEnv(t *testing.T) *env {
	t.Helper()
	return envOn(t, natstest.Server(t, t.TempDir(), -1), consumer.Settings{AckWait: testAckWait})
}

func envOn(t *testing.T, srv *server.Server, set consumer.Settings) *env {
	t.Helper()
	nc, js := natstest.Connect(t, srv)
	ctx := context.Background()
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := consumer.Provision(ctx, js, set); err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.NewSessions(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	breakers, err := kvstore.NewBreakers(ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, srv: srv, nc: nc, js: js, store: store, breakers: breakers, counter: c}
}

// replica is one running compactor: its own connection, stores and
// pipeline, as a separate process would have.
type replica struct {
	nc     *nats.Conn
	cons   *consumer.Consumer
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(sum pipeline.Summarizer, cfg pipeline.Config, opt consumer.Options) *replica {
	e.t.Helper()
	return e.startWith(sum, cfg, opt, nil)
}

// startWith starts a replica whose session store is wrap(store) (a store
// that fails, say).
func (e *env) startWith(sum pipeline.Summarizer, cfg pipeline.Config, opt consumer.Options, wrap func(pipeline.SessionStore) pipeline.SessionStore) *replica {
	e.t.Helper()
	nc, js := natstest.Connect(e.t, e.srv)
	ctx := context.Background()
	store, err := kvstore.NewSessions(ctx, nc, js)
	if err != nil {
		e.t.Fatal(err)
	}
	breakers, err := kvstore.NewBreakers(ctx, nc, js)
	if err != nil {
		e.t.Fatal(err)
	}
	if sum == nil {
		sum = extractive.New(e.counter)
	}
	var ss pipeline.SessionStore = store
	if wrap != nil {
		ss = wrap(store)
	}
	svc, err := pipeline.New(ss, breakers, sum, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if opt.RetryDelay == nil {
		opt.RetryDelay = func(uint64) time.Duration { return 50 * time.Millisecond }
	}
	r := &replica{nc: nc, cons: consumer.New(nc, js, svc, opt), done: make(chan error, 1)}
	ctx, r.cancel = context.WithCancel(ctx)
	go func() { r.done <- r.cons.Run(ctx) }()
	e.t.Cleanup(r.stop)
	return r
}

// stop shuts the replica down cleanly.
func (r *replica) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	<-r.done
	r.cancel = nil
}

func chat(turns int) []session.Message {
	out := []session.Message{{Role: session.RoleSystem, Content: session.TextContent("You are a travel agent. Follow the airline policy.")}}
	for i := range turns {
		id := fmt.Sprintf("call_%d", i)
		out = append(out,
			session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Turn %d: please check reservation RES%04d for passenger Ada Lovelace, flight HAT%03d.", i, i, i))},
			session.Message{Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: id, Type: "function",
				Function: session.FunctionCall{Name: "get_reservation_details", Arguments: fmt.Sprintf(`{"reservation_id":"RES%04d"}`, i)}}}},
			session.Message{Role: session.RoleTool, ToolCallID: id, Content: session.TextContent(fmt.Sprintf(`{"reservation_id":"RES%04d","cabin":"economy","price":%d}`, i, 100+i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("Reservation RES%04d is confirmed in economy; it cost $%d.", i, 100+i))},
		)
	}
	return out
}

func (e *env) importSession(id string, limit int, msgs []session.Message) {
	e.t.Helper()
	for i := range msgs {
		e.counter.Ensure(&msgs[i])
	}
	if _, err := e.store.Create(context.Background(), session.Record{SessionID: id, Model: "gpt-4o", ContextLimit: limit}, msgs); err != nil {
		e.t.Fatal(err)
	}
}

// request publishes a request event in binary mode with its id as
// Nats-Msg-Id (unless noMsgID) and returns the id.
func (e *env) request(id, typ, sid string, noMsgID bool) string {
	e.t.Helper()
	ev, err := events.NewEvent(id, typ, "urn:test-runtime", sid, time.Now(), contract.RequestData{SessionID: sid, Model: "gpt-4o"})
	if err != nil {
		e.t.Fatal(err)
	}
	h, body := events.EncodeBinary(ev)
	m := &nats.Msg{Subject: contract.Subject(typ, sid), Header: h, Data: body}
	if noMsgID {
		m.Header.Del(jetstream.MsgIDHeader)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// event is a stored result or circuit event.
type event struct {
	Subject string
	ID      string
	Type    string
	Data    map[string]any
	raw     []byte
}

// streamEvents reads every message of a stream, in order.
func (e *env) streamEvents(stream string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	ctx := context.Background()
	st, err := e.js.Stream(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// results returns the result stream's events, each data validated against
// its schema.
func (e *env) results() []event {
	e.t.Helper()
	var out []event
	for _, m := range e.streamEvents(consumer.ResultStream) {
		ev := event{Subject: m.Subject, ID: m.Header.Get("ce-id"), Type: m.Header.Get("ce-type"), raw: m.Data}
		if ev.ID != m.Header.Get(jetstream.MsgIDHeader) || m.Header.Get("ce-specversion") != "1.0" || m.Header.Get("ce-source") == "" {
			e.t.Fatalf("event %s: bad attributes %v", m.Subject, m.Header)
		}
		name := map[string]string{contract.TypeCompactionCompleted: schemas.CompactionCompleted, contract.TypeCompactionFailed: schemas.CompactionFailed,
			contract.TypeCompactionCircuitOpened: schemas.CompactionCircuitOpened, contract.TypeCompactionCircuitClosed: schemas.CompactionCircuitClosed}[ev.Type]
		if name == "" {
			e.t.Fatalf("event of unknown type %q", ev.Type)
		}
		if err := schemas.Validate(name, m.Data); err != nil {
			e.t.Fatalf("%s data does not validate: %v\n%s", ev.Type, err, m.Data)
		}
		if err := json.Unmarshal(m.Data, &ev.Data); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// waitFor polls cond until it holds or the time is up.
func (e *env) waitFor(what string, within time.Duration, cond func() bool) {
	e.t.Helper()
	natstest.Eventually(e.t, within, 20*time.Millisecond, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

// resultsFor waits until n events of the given types exist for the
// session, then lets the system settle and returns them all.
func (e *env) resultsFor(sid string, n int, within time.Duration, types ...string) []event {
	e.t.Helper()
	var got []event
	e.waitFor(fmt.Sprintf("%d %v events of %s", n, types, sid), within, func() bool {
		got = filter(e.results(), sid, types...)
		return len(got) >= n
	})
	time.Sleep(300 * time.Millisecond) // a duplicate would show up by now
	return filter(e.results(), sid, types...)
}

func filter(evs []event, sid string, types ...string) []event {
	var out []event
	for _, ev := range evs {
		if ev.Data["session_id"] != sid {
			continue
		}
		for _, t := range types {
			if ev.Type == t {
				out = append(out, ev)
			}
		}
	}
	return out
}

// pendingRequests is how many requests AGENT_CONTEXT still holds.
func (e *env) pendingRequests() uint64 {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), consumer.RequestStream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// compactions counts the session's compaction messages in its history.
func (e *env) compactions(sid string) int {
	e.t.Helper()
	_, comps, err := e.store.History(context.Background(), sid)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(comps)
}

// gate is a summariser that blocks every call until released, telling
// entered when a call arrives.
type gate struct {
	next    pipeline.Summarizer
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
	once    sync.Once
}

func newGate(next pipeline.Summarizer) *gate {
	return &gate{next: next, entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gate) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	g.calls.Add(1)
	g.entered <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return pipeline.SummaryResponse{}, ctx.Err()
	}
	return g.next.Summarize(ctx, r)
}

func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// failing fails every call; retryable says whether its error may pass.
type failing struct {
	calls     atomic.Int64
	retryable bool
	fails     int64 // fail this many calls, then pass to next (0: always)
	next      pipeline.Summarizer
}

type failErr struct{ retryable bool }

func (e failErr) Error() string   { return "summary model answered 503 Service Unavailable" }
func (e failErr) Retryable() bool { return e.retryable }

func (f *failing) Summarize(ctx context.Context, r pipeline.SummaryRequest) (pipeline.SummaryResponse, error) {
	n := f.calls.Add(1)
	if f.fails > 0 && n > f.fails {
		return f.next.Summarize(ctx, r)
	}
	return pipeline.SummaryResponse{}, failErr{f.retryable}
}

// flakyStore fails its first fails commits as an unavailable store does (a
// leader failover): the compaction is worth retrying.
type flakyStore struct {
	pipeline.SessionStore
	fails   int64 // fail this many commits (<0: all)
	commits atomic.Int64
}

func (f *flakyStore) Commit(ctx context.Context, c session.Commit) (bool, error) {
	if n := f.commits.Add(1); f.fails < 0 || n <= f.fails {
		return false, fmt.Errorf("write record: %w: nats: no responders available for request", session.ErrUnavailable)
	}
	return f.SessionStore.Commit(ctx, c)
}

func flaky(fails int64) func(pipeline.SessionStore) pipeline.SessionStore {
	return func(s pipeline.SessionStore) pipeline.SessionStore { return &flakyStore{SessionStore: s, fails: fails} }
}

// provider starts a local OpenAI-compatible model behaving as b and
// returns the service's router to it (the openai provider, retries as in
// production but quick).
func (e *env) provider(b fakeprovider.Behaviour) (*fakeprovider.Server, pipeline.Summarizer) {
	e.t.Helper()
	fp, err := fakeprovider.Start(b)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(fp.Close)
	r, err := fp.Summarizer(extractive.New(e.counter))
	if err != nil {
		e.t.Fatal(err)
	}
	return fp, r
}

// openAIConfig is a pipeline config that summarises with the openai
// provider's model.
func openAIConfig() pipeline.Config {
	cfg := pipeline.DefaultConfig()
	cfg.SummaryModel, cfg.SummaryProvider = "gpt-4o-mini", "openai"
	return cfg
}

// coreResults counts the result events a core subscriber (not the stream)
// sees on compaction.*.>, by event id.
func (e *env) coreResults() func() map[string]int {
	e.t.Helper()
	nc, _ := natstest.Connect(e.t, e.srv)
	var mu sync.Mutex
	seen := map[string]int{}
	_, err := nc.Subscribe("compaction.*.>", func(m *nats.Msg) {
		if t := m.Header.Get("ce-type"); t == contract.TypeCompactionCompleted || t == contract.TypeCompactionFailed {
			mu.Lock()
			seen[m.Header.Get("ce-id")]++
			mu.Unlock()
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	nc.Flush()
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(seen)
	}
}
