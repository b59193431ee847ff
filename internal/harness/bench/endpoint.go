package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
	"github.com/compactor/compactor/internal/wire"
)

// EndpointRow is appends as a runtime makes them: through
// compactor.session.append (the Go client, a request and its reply), to
// `compactor serve` as it runs (its endpoints, preparer and consumer, in
// this process), against raw KV puts and the use case in process measured
// in the same run (AppendRow).
type EndpointRow struct {
	// Sync is how the server syncs its store: "always" or the interval.
	Sync     string  `json:"sync"`
	Runtimes int     `json:"runtimes"`
	Floor    float64 `json:"kv_puts_per_s"`
	// InProcess is the use case's appends a second (AppendRow.Appends).
	InProcess float64 `json:"in_process_appends_per_s"`
	// Below: each runtime appends to sessions that stay far below
	// prepare_at (a new one every endpointSessionMessages messages):
	// nothing to prepare. Passing: one session each, at the default
	// window of its model, which it passes prepare_at of (and its limit)
	// within seconds: the preparer's work is in the figure.
	Below        float64 `json:"below_appends_per_s"`
	BelowRatio   float64 `json:"below_ratio"`
	Passing      float64 `json:"passing_appends_per_s"`
	PassingRatio float64 `json:"passing_ratio"`
	// CPU milliseconds per append: the server's, and this process's (the
	// runtimes' client and the service). FloorClientMS is this
	// process's per KV put (the runtimes' client alone), InProcessMS per
	// append through the use case.
	FloorClientMS    float64 `json:"floor_client_cpu_ms"`
	InProcessMS      float64 `json:"in_process_cpu_ms"`
	BelowServerMS    float64 `json:"below_server_cpu_ms"`
	BelowProcessMS   float64 `json:"below_process_cpu_ms"`
	PassingServerMS  float64 `json:"passing_server_cpu_ms"`
	PassingProcessMS float64 `json:"passing_process_cpu_ms"`
	// Relay is the floor of any endpoint that writes an append: a NATS
	// micro endpoint on the same server that puts each request's body as
	// one KV value and replies (startRelay), driven by as many runtimes
	// with the same bodies. RelayRatio is Below over it: what the
	// service costs beyond a request, its reply and one write.
	Relay      float64 `json:"relay_per_s"`
	RelayRatio float64 `json:"below_over_relay"`
	// Prepared is the preparations made during the passing run.
	Prepared int64 `json:"prepared"`
	Errors   int   `json:"errors"`
}

// LengthRow is one runtime's appends through the endpoint to a session
// already holding Messages messages.
type LengthRow struct {
	Messages  int     `json:"messages"`
	Appends   float64 `json:"appends_per_s"`
	MSPer     float64 `json:"ms_per_append"`
	ProcessMS float64 `json:"process_cpu_ms"`
	ServerMS  float64 `json:"server_cpu_ms"`
}

// endpointSessionMessages is how many messages a "below" session takes
// before its runtime moves to a new one: some 30,000 tokens of the
// bundled run, far below prepare_at of gpt-4.1's window.
const endpointSessionMessages = 200

// endpointEnv is the service serving the scale run's server.
type endpointEnv struct {
	nc     *nats.Conn
	client *client.Client
	stop   func()
	// prepares counts the preparations made.
	prepares atomic.Int64
	// firstErr is the first append that failed, for the error.
	firstErr atomic.Pointer[error]
	// relayStop stops the relay (startRelay).
	relayStop func()
}

// startEndpoints starts the service against srv (already provisioned) as
// serve runs it, with a model that answers at once.
func startEndpoints(ctx context.Context, srv *Server, shards int) (*endpointEnv, error) {
	counter, err := tokens.ForEncoding("cl100k_base")
	if err != nil {
		return nil, err
	}
	model := &timedSummarizer{next: extractive.New(counter)}
	model.instant.Store(true)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e := &endpointEnv{}
	svc, err := app.Start(runCtx, app.Config{NATSURL: srv.URL, Provision: true, Shards: shards, Pipeline: pipeline.DefaultConfig(), Summarizer: model,
		ObservePreparation: func(p pipeline.Preparation, err error) {
			if err == nil && p.Outcome == pipeline.PrepareDone {
				e.prepares.Add(1)
			}
		}})
	if err != nil {
		cancel()
		return nil, err
	}
	e.stop = func() { cancel(); _ = svc.Wait() }
	if e.nc, err = nats.Connect(srv.URL); err != nil {
		e.close()
		return nil, err
	}
	if e.client, err = client.New(e.nc, client.WithSource("urn:compactor:bench")); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *endpointEnv) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.relayStop != nil {
		e.relayStop()
	}
	e.stop()
}

// relaySubject is the relay's endpoint (startRelay).
const relaySubject = "bench.relay.append"

// startRelay starts the relay on srv: a micro service whose endpoint puts
// each request's body in a KV bucket of its own (file storage, one
// replica, as the service's) and replies once the put is acknowledged,
// each request in its own goroutine (as the service answers). It is what
// an append through any request/reply endpoint costs at least: the
// request, one JetStream write and the reply.
func (e *endpointEnv) startRelay(ctx context.Context, srv *Server) error {
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return err
	}
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_relay", Storage: jetstream.FileStorage, History: 1})
	if err != nil {
		nc.Close()
		return err
	}
	var n atomic.Int64
	svc, err := micro.AddService(nc, micro.Config{Name: "bench-relay", Version: "0.0.1"})
	if err != nil {
		nc.Close()
		return err
	}
	err = svc.AddEndpoint("append", micro.HandlerFunc(func(r micro.Request) {
		go func() {
			if _, err := kv.Put(ctx, fmt.Sprintf("r.%d", n.Add(1)), r.Data()); err != nil {
				_ = r.Error("503", err.Error(), nil)
				return
			}
			_ = r.Respond([]byte(`{"status":"applied"}`))
		}()
	}), micro.WithEndpointSubject(relaySubject))
	if err != nil {
		_ = svc.Stop()
		nc.Close()
		return err
	}
	e.relayStop = func() { _ = svc.Stop(); nc.Close() }
	return nil
}

// relayRun drives c runtimes through the relay for d, each request the
// body the client sends for one of the pool's messages.
func (e *endpointEnv) relayRun(ctx context.Context, c int, d time.Duration, pool []client.Message) (float64, error) {
	bodies := make([][]byte, len(pool))
	for i := range pool {
		b, err := json.Marshal(map[string]any{"session_id": "relay", "messages": pool[i : i+1]})
		if err != nil {
			return 0, err
		}
		bodies[i] = b
	}
	rate, errs := drive(c, d, func(w, k int) error {
		_, err := e.nc.RequestWithContext(ctx, relaySubject, bodies[(w*7919+k)%len(bodies)])
		return err
	})
	if errs > 0 {
		return rate, fmt.Errorf("%d relay requests failed", errs)
	}
	return rate, nil
}

// endpointRun measures c runtimes appending through the endpoint: below
// prepare_at (a new gpt-4.1 session every endpointSessionMessages), then
// passing it (one gpt-4o session each, growing past prepare_at and its
// limit).
func (e *endpointEnv) endpointRun(ctx context.Context, srv *Server, tag string, c int, d time.Duration, pool []client.Message) (EndpointRow, error) {
	row := EndpointRow{Runtimes: c}
	run := func(model string, per int) (rate, serverMS, processMS float64, errs int, err error) {
		// Each runtime's next message, and its session (a new one, for
		// "below", once per messages have gone and the next message is
		// not a tool result, which must follow its call).
		next, session := make([]int, c), make([]int, c)
		name := strings.ReplaceAll(model, ".", "_")
		sid := func(w int) string { return fmt.Sprintf("%s-%s-%d-%d", tag, name, w, session[w]) }
		create := func(w int) error {
			_, err := e.client.Create(ctx, sid(w), client.NewSession{Model: model, Messages: pool[:1]})
			return err
		}
		for w := range c {
			if err := create(w); err != nil {
				return 0, 0, 0, 0, err
			}
		}
		var appended atomic.Int64
		cpu0, _ := procStat(srv.PID)
		self0 := selfCPU()
		rate, errs = drive(c, d, func(w, _ int) error {
			m := pool[next[w]%(len(pool)-1)+1]
			if per > 0 && next[w]/per > session[w] && m.Role != client.Tool {
				session[w]++
				if err := create(w); err != nil {
					return err
				}
			}
			m.ID = fmt.Sprintf("m%d", next[w])
			if _, err := e.client.Append(ctx, sid(w), []client.Message{m}); err != nil {
				e.firstErr.CompareAndSwap(nil, &err)
				return err
			}
			next[w]++
			appended.Add(1)
			return nil
		})
		cpu1, _ := procStat(srv.PID)
		self1 := selfCPU()
		n := float64(max(appended.Load(), 1))
		return rate, float64(cpu1-cpu0) / float64(time.Millisecond) / n, float64(self1-self0) / float64(time.Millisecond) / n, errs, nil
	}
	var err error
	var errs int
	if row.Below, row.BelowServerMS, row.BelowProcessMS, errs, err = run("gpt-4.1", endpointSessionMessages); err != nil {
		return row, err
	}
	row.Errors += errs
	prepared0 := e.prepares.Load()
	if row.Passing, row.PassingServerMS, row.PassingProcessMS, errs, err = run("gpt-4o", 0); err != nil {
		return row, err
	}
	row.Errors += errs
	row.Prepared = e.prepares.Load() - prepared0
	return row, nil
}

// lengthRun measures one runtime's appends through the endpoint to a
// session that holds n messages already (gpt-4.1: below prepare_at).
func (e *endpointEnv) lengthRun(ctx context.Context, srv *Server, n int, d time.Duration, pool []client.Message) (LengthRow, error) {
	row := LengthRow{Messages: n}
	sid := fmt.Sprintf("len-%d", n)
	if _, err := e.client.Create(ctx, sid, client.NewSession{Model: "gpt-4.1", Messages: pool[:1]}); err != nil {
		return row, err
	}
	// Filled with short exchanges, so that the longest stays far below
	// prepare_at (10,000 of the bundled run's messages are 1.5M tokens).
	for have := 1; have < n; {
		k := min(contract.MaxMessagesPerCall, n-have)
		batch := make([]client.Message, k)
		for i := range batch {
			batch[i] = client.Text(fmt.Sprintf("f%d", have+i), client.User, fmt.Sprintf("step %d done", have+i))
			if (have+i)%2 == 0 {
				batch[i].Role = client.Assistant
			}
		}
		if _, err := e.client.Append(ctx, sid, batch); err != nil {
			return row, err
		}
		have += k
	}
	// The run's messages without tool calls and results (which must
	// follow each other).
	var plain []client.Message
	for _, m := range pool[1:] {
		if m.Role != client.Tool && len(m.ToolCalls) == 0 {
			plain = append(plain, m)
		}
	}
	var appended atomic.Int64
	cpu0, _ := procStat(srv.PID)
	self0 := selfCPU()
	start := time.Now()
	rate, errs := drive(1, d, func(_, k int) error {
		m := plain[k%len(plain)]
		m.ID = fmt.Sprintf("m%d", k)
		_, err := e.client.Append(ctx, sid, []client.Message{m})
		if err == nil {
			appended.Add(1)
		}
		return err
	})
	took := time.Since(start)
	if errs > 0 {
		return row, fmt.Errorf("%d appends failed", errs)
	}
	cpu1, _ := procStat(srv.PID)
	self1 := selfCPU()
	a := float64(max(appended.Load(), 1))
	row.Appends, row.MSPer = rate, float64(took)/float64(time.Millisecond)/a
	row.ServerMS, row.ProcessMS = float64(cpu1-cpu0)/float64(time.Millisecond)/a, float64(self1-self0)/float64(time.Millisecond)/a
	return row, nil
}

// endpointRows measures appends through the endpoint at each of
// runtimes on a fresh server syncing its store every sync (0: always),
// each beside raw KV puts and the use case in process on that server.
func endpointRows(ctx context.Context, dir string, opt ScaleOptions, sync time.Duration, pool []session.Message, raws []json.RawMessage, p func(string, ...any)) ([]EndpointRow, []LengthRow, error) {
	srv, err := opt.StartServer(ctx, dir, sync)
	if err != nil {
		return nil, nil, err
	}
	defer srv.Stop()
	e, err := newScaleEnv(ctx, srv, opt.Shards, 1)
	if err != nil {
		return nil, nil, err
	}
	defer e.nc.Close()
	ep, err := startEndpoints(ctx, srv, opt.Shards)
	if err != nil {
		return nil, nil, err
	}
	defer ep.close()
	if err := ep.startRelay(ctx, srv); err != nil {
		return nil, nil, fmt.Errorf("relay: %w", err)
	}
	cp, err := wire.Convert[[]client.Message](pool)
	if err != nil {
		return nil, nil, err
	}
	name := "always"
	if sync > 0 {
		name = sync.String()
	}
	var rows []EndpointRow
	for _, c := range opt.Runtimes {
		in, err := e.appendRun(ctx, fmt.Sprintf("p%d", c), c, opt.AppendFor, pool, raws)
		if err != nil {
			return nil, nil, fmt.Errorf("in process x%d: %w", c, err)
		}
		row, err := ep.endpointRun(ctx, srv, fmt.Sprintf("e%d", c), c, opt.AppendFor, cp)
		if err != nil {
			return nil, nil, fmt.Errorf("endpoint x%d: %w", c, err)
		}
		if row.Errors > 0 {
			return nil, nil, fmt.Errorf("endpoint x%d: %d appends failed, the first: %v", c, row.Errors, *ep.firstErr.Load())
		}
		if row.Relay, err = ep.relayRun(ctx, c, opt.AppendFor, cp); err != nil {
			return nil, nil, fmt.Errorf("relay x%d: %w", c, err)
		}
		row.Sync, row.Floor, row.InProcess, row.FloorClientMS, row.InProcessMS = name, in.Floor, in.Appends, in.FloorClientMS, in.ServiceMS
		row.BelowRatio, row.PassingRatio, row.RelayRatio = row.Below/row.Floor, row.Passing/row.Floor, row.Below/max(row.Relay, 1)
		p("endpoint (sync %s) x%-2d: %.0f/s below prepare_at (%.2fx), %.0f/s passing it (%.2fx, %d prepared), %.0f in process, %.0f KV puts/s, %.0f through the relay (below %.2fx of it); process CPU %.3f ms/append (in process %.3f, KV client %.3f)",
			name, c, row.Below, row.BelowRatio, row.Passing, row.PassingRatio, row.Prepared, row.InProcess, row.Floor, row.Relay, row.RelayRatio, row.BelowProcessMS, row.InProcessMS, row.FloorClientMS)
		rows = append(rows, row)
	}
	var lengths []LengthRow
	for _, n := range opt.Lengths {
		l, err := ep.lengthRun(ctx, srv, n, opt.AppendFor, cp)
		if err != nil {
			return nil, nil, fmt.Errorf("appends at %d messages: %w", n, err)
		}
		p("endpoint (sync %s), one runtime, %d messages in its session: %.0f appends/s, %.3f ms each", name, n, l.Appends, l.MSPer)
		lengths = append(lengths, l)
	}
	return rows, lengths, nil
}
