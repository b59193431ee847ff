package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/embedded"
	"github.com/compactor/compactor/internal/kvstore"
	"github.com/compactor/compactor/internal/models"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/sessions"
	"github.com/compactor/compactor/internal/transcript"
)

// Server is a nats-server the scale benchmark runs against.
type Server struct {
	URL string
	// PID is the server's process when it runs apart (0: in this
	// process, whose CPU and memory then include the server's).
	PID  int
	Stop func()
	// Heap, when set, answers the server's live heap after a full
	// collection.
	Heap func(ctx context.Context) (int64, error)
}

// ScaleOptions tune the scale benchmark.
type ScaleOptions struct {
	// StartServer starts a standalone server storing under dir, syncing
	// its store every sync (0: after every write, the embedded server's
	// default; default: an embedded one in this process).
	StartServer func(ctx context.Context, dir string, sync time.Duration) (*Server, error)
	// Runtimes are the append concurrencies (default 1, 8, 64).
	Runtimes []int
	// AppendFor is how long each append measurement runs (default 4 s).
	AppendFor time.Duration
	// Lengths are the session lengths one runtime's appends through the
	// endpoint are timed at (default 10, 1,000, 10,000 messages).
	Lengths []int
	// Fill is the messages written to measure subjects, bytes and memory
	// per message (default 20,000).
	Fill int
	// Sweeps are the session counts of the sweep measurement (default
	// 1k, 10k, 100k).
	Sweeps []int
	// Shards of the store (default 3).
	Shards int
	// Compactions run the compactions-per-second comparison (default
	// the requests, 16 at once, in rounds; 0 requests: skipped).
	Compactions int
	// Cluster runs the three-node comparison.
	Cluster bool
	// Conversations, when set, are replayed by eval in process and
	// through the service at EvalLimit (default 4,000 tokens).
	Conversations []transcript.Conversation
	EvalLimit     int
	Progress      io.Writer
}

func (o *ScaleOptions) defaults() {
	if o.StartServer == nil {
		o.StartServer = inProcessServer
	}
	if len(o.Runtimes) == 0 {
		o.Runtimes = []int{1, 8, 64}
	}
	if o.AppendFor <= 0 {
		o.AppendFor = 4 * time.Second
	}
	if o.Fill <= 0 {
		o.Fill = 20000
	}
	if len(o.Lengths) == 0 {
		o.Lengths = []int{10, 1000, 10000}
	}
	if len(o.Sweeps) == 0 {
		o.Sweeps = []int{1000, 10000, 100000}
	}
	if o.Shards <= 0 {
		o.Shards = 3
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.EvalLimit <= 0 {
		o.EvalLimit = 4000
	}
}

func inProcessServer(_ context.Context, dir string, sync time.Duration) (*Server, error) {
	srv, err := embedded.Start(embedded.Options{Port: -1, DataDir: dir, SyncInterval: sync})
	if err != nil {
		return nil, err
	}
	return &Server{URL: srv.ClientURL(), Stop: func() { embedded.Stop(srv) }}, nil
}

// ScaleReport is what `compactor bench --scale` measures (docs/SCALE.md,
// docs/scale.json).
type ScaleReport struct {
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Started  time.Time `json:"started"`
	Seconds  float64   `json:"seconds"`
	Shards   int       `json:"shards"`
	Separate bool      `json:"server_in_own_process"`
	MsgBytes float64   `json:"message_json_bytes"`
	Appends  []AppendRow
	PerMsg   PerMessage     `json:"per_message"`
	Sweeps   []SweepRow     `json:"sweeps"`
	Compact  *ThroughputRow `json:"compactions,omitempty"`
	Cluster  *ClusterRow    `json:"cluster,omitempty"`
	Eval     *EvalRow       `json:"eval,omitempty"`
	// Endpoint is appends through compactor.session.append, on a server
	// syncing always and one syncing every second; Lengths one
	// runtime's at several session lengths (on the second).
	Endpoint []EndpointRow `json:"endpoint"`
	Lengths  []LengthRow   `json:"lengths"`
	// Durability is appends and KV puts on one node at each way of
	// syncing the store to disk.
	Durability []DurabilityRow `json:"durability"`
	Sizing     []SizingRow     `json:"sizing"`
	Goals      []Goal          `json:"goals"`
	SizingFor  string          `json:"sizing_assumptions"`
}

// AppendRow compares appends with raw KV puts of the same bytes.
type AppendRow struct {
	Runtimes int     `json:"runtimes"`
	Floor    float64 `json:"kv_puts_per_s"`
	Appends  float64 `json:"appends_per_s"`
	Ratio    float64 `json:"ratio"`
	// CPU milliseconds per operation: the server's (0 when it shares this
	// process) and this process's (the runtimes, the service's use case
	// and store).
	FloorServerMS   float64 `json:"floor_server_cpu_ms"`
	ServerMS        float64 `json:"server_cpu_ms"`
	FloorClientMS   float64 `json:"floor_client_cpu_ms"`
	ServiceMS       float64 `json:"service_cpu_ms"`
	AppendErrors    int     `json:"append_errors"`
	PerShardAppends []int   `json:"per_shard_appends"`
}

// PerMessage is the storage a message costs, against a KV bucket with a
// key per message.
type PerMessage struct {
	Messages         int     `json:"messages"`
	Sessions         int     `json:"sessions"`
	Subjects         float64 `json:"subjects"`
	FloorSubjects    float64 `json:"floor_subjects"`
	Bytes            float64 `json:"bytes"`
	FloorBytes       float64 `json:"floor_bytes"`
	ServerMemory     float64 `json:"server_memory_bytes"`
	FloorMemory      float64 `json:"floor_server_memory_bytes"`
	MemoryRatio      float64 `json:"memory_ratio"`
	SubjectsPerSess  float64 `json:"subjects_per_session"`
	RecordBytes      float64 `json:"record_bytes"`
	MemoryMeasurable bool    `json:"memory_measured"`
}

// SweepRow is one idle sweep (nothing to delete) against reading the same
// number of records from a bucket of records only.
type SweepRow struct {
	Sessions     int     `json:"sessions"`
	SweepMS      float64 `json:"sweep_ms"`
	FloorMS      float64 `json:"floor_ms"`
	Ratio        float64 `json:"ratio"`
	PeakGrowthMB float64 `json:"peak_server_memory_growth_mb"`
	PerSessionUS float64 `json:"us_per_session"`
}

// ClusterRow compares appends on a three-node cluster (R3) with one node.
type ClusterRow struct {
	Runtimes int     `json:"runtimes"`
	OneNode  float64 `json:"one_node_appends_per_s"`
	// Replicated is R3 on three nodes.
	Replicated NodesRun `json:"r3"`
}

// NodesRun is appends on a three-node cluster.
type NodesRun struct {
	Replicas int     `json:"replicas"`
	Appends  float64 `json:"appends_per_s"`
	Ratio    float64 `json:"ratio"` // against one node
	// Floor is raw KV puts on the same cluster (a bucket of as many
	// replicas, its leader on one node).
	Floor   float64        `json:"kv_puts_per_s"`
	Leaders map[string]int `json:"leaders"` // stream -> node (1-based)
	Nodes   int            `json:"nodes_leading"`
	PerNode map[int]int    `json:"appends_per_leader_node"`
	// Busiest is the most appends a leader node took; Imbalance that
	// against an even third.
	Busiest   int     `json:"busiest_leader_node_appends"`
	Imbalance float64 `json:"busiest_over_even_share"`
}

// SizingRow is the sizing model's answer for a number of live sessions.
type SizingRow struct {
	Sessions     int     `json:"sessions"`
	Messages     float64 `json:"messages"`
	AppendsPerS  float64 `json:"appends_per_s"`
	DiskGB       float64 `json:"disk_gb_per_replica"`
	MemoryGB     float64 `json:"server_memory_gb_per_replica"`
	ServerCores  float64 `json:"server_cores"`
	ServiceCores float64 `json:"service_cores"`
	Shards       int     `json:"shards"`
	Nodes        int     `json:"nodes"`
	SweepS       float64 `json:"sweep_s"`
	Limit        string  `json:"limit"`
}

// Goal is one of the goals, met or not.
type Goal struct {
	What string `json:"what"`
	Want string `json:"want"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

// procStat returns a process's CPU time and resident memory (0s when pid
// is 0 or /proc has none).
func procStat(pid int) (cpu time.Duration, rss int64) {
	if pid == 0 {
		return 0, 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 22 {
		return 0, 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100), pages * int64(os.Getpagesize())
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// scaleEnv is one server with the store provisioned.
type scaleEnv struct {
	srv   *Server
	nc    *nats.Conn
	js    jetstream.JetStream
	store *kvstore.Sessions
	svc   *sessions.Service
	floor jetstream.KeyValue
}

func newScaleEnv(ctx context.Context, srv *Server, shards, replicas int) (*scaleEnv, error) {
	nc, err := nats.Connect(srv.URL, nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	js, _ := jetstream.New(nc)
	e := &scaleEnv{srv: srv, nc: nc, js: js}
	if err := kvstore.Provision(ctx, js, kvstore.ProvisionOptions{Replicas: replicas, Shards: shards}); err != nil {
		return nil, err
	}
	if replicas > 1 {
		if _, err := kvstore.BalanceLeaders(ctx, nc, js); err != nil {
			return nil, err
		}
	}
	if e.store, err = kvstore.NewSessions(ctx, nc, js); err != nil {
		return nil, err
	}
	e.svc = sessions.New(e.store, nil, models.Default())
	if e.floor, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_floor", History: 1, Replicas: replicas, Storage: jetstream.FileStorage}); err != nil {
		return nil, err
	}
	return e, nil
}

// drive runs n workers calling do(worker, k) until d has passed, and
// returns the calls per second and the errors.
func drive(n int, d time.Duration, do func(w, k int) error) (float64, int) {
	var done, failed atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	start := time.Now()
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; time.Now().Before(stop); k++ {
				if err := do(w, k); err != nil {
					failed.Add(1)
					continue
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds(), int(failed.Load())
}

// appendPool is the messages the runtimes append: a real agent session
// (the bundled tau-bench run), in order, its call ids unique per cycle.
//
// The pool is whole cycles of the run (at least n messages), so that a
// runtime that has appended them all goes on from the first after the
// system prompt: the last message of a cycle may come before the first.
// (A pool that ended inside a cycle refused every append past its end:
// make scale's one runtime appended 4,000 and then spent its time on
// refusals.)
func appendPool(n int) ([]session.Message, []json.RawMessage, float64, error) {
	src, err := transcript.Parse(demo.Trajectory)
	if err != nil {
		return nil, nil, 0, err
	}
	body := len(src) - 1
	msgs, err := sessionOf(1 + (n-1+body-1)/body*body)
	if err != nil {
		return nil, nil, 0, err
	}
	raws := make([]json.RawMessage, len(msgs))
	total := 0
	for i := range msgs {
		b, _ := json.Marshal(&msgs[i])
		raws[i] = b
		total += len(b)
	}
	return msgs, raws, float64(total) / float64(len(msgs)), nil
}

// appendRun measures c runtimes appending to their own sessions against c
// writers putting the same bytes as KV values, one key each.
func (e *scaleEnv) appendRun(ctx context.Context, tag string, c int, d time.Duration, pool []session.Message, raws []json.RawMessage) (AppendRow, error) {
	row := AppendRow{Runtimes: c}
	cpu0, _ := procStat(e.srv.PID)
	self0 := selfCPU()
	var puts atomic.Int64
	rate, failed := drive(c, d, func(w, k int) error {
		puts.Add(1)
		_, err := e.floor.Put(ctx, fmt.Sprintf("%s.%d.%d", tag, w, k), raws[(k+1)%len(raws)])
		return err
	})
	if failed > 0 {
		return row, fmt.Errorf("%d KV puts failed", failed)
	}
	cpu1, _ := procStat(e.srv.PID)
	self1 := selfCPU()
	row.Floor = rate
	n := float64(puts.Load())
	row.FloorServerMS = float64(cpu1-cpu0) / float64(time.Millisecond) / n
	row.FloorClientMS = float64(self1-self0) / float64(time.Millisecond) / n

	ids := make([]string, c)
	for w := range c {
		ids[w] = fmt.Sprintf("%s-%d", tag, w)
		if _, err := e.svc.Create(ctx, session.Record{SessionID: ids[w], Model: "gpt-4o"}, pool[:1]); err != nil {
			return row, err
		}
	}
	var appended atomic.Int64
	next := make([]int, c) // each runtime's next message, in order
	cpu0, _ = procStat(e.srv.PID)
	self0 = selfCPU()
	rate, failed = drive(c, d, func(w, _ int) error {
		i := next[w]%(len(pool)-1) + 1
		m := pool[i]
		m.ID = fmt.Sprintf("m%d", next[w])
		_, err := e.svc.Append(ctx, ids[w], []session.Message{m}, session.AppendOptions{})
		if err == nil {
			next[w]++
			appended.Add(1)
		}
		return err
	})
	cpu1, _ = procStat(e.srv.PID)
	self1 = selfCPU()
	row.Appends, row.AppendErrors = rate, failed
	n = float64(appended.Load())
	row.ServerMS = float64(cpu1-cpu0) / float64(time.Millisecond) / n
	row.ServiceMS = float64(self1-self0) / float64(time.Millisecond) / n
	row.Ratio = row.Appends / row.Floor
	row.PerShardAppends = make([]int, e.store.Shards())
	for w := range c {
		row.PerShardAppends[kvstore.ShardOf(kvstore.DefaultTenant, ids[w], e.store.Shards())] += next[w]
	}
	return row, nil
}

// streamsState sums subjects and bytes of the store's streams, or of the
// floor bucket's.
func (e *scaleEnv) streamsState(ctx context.Context, names []string) (subjects, bytes uint64, err error) {
	for _, name := range names {
		st, err := e.js.Stream(ctx, name)
		if err != nil {
			return 0, 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, 0, err
		}
		subjects += info.State.NumSubjects
		bytes += info.State.Bytes
	}
	return subjects, bytes, nil
}

func (e *scaleEnv) storeStreams() []string {
	var out []string
	for n := range e.store.Shards() {
		out = append(out, kvstore.DataStream(n), "KV_"+kvstore.RecordsBucket(n))
	}
	return out
}

// fill writes m messages into sessions of per messages each (and the same
// bytes as KV values into a fresh bucket) and measures what a message
// costs.
// fillKV puts m values into kv, a key per message (sessions of per), by
// 64 writers.
func fillKV(ctx context.Context, kv jetstream.KeyValue, m, per int, raws []json.RawMessage) error {
	var k atomic.Int64
	return parallel(64, func() error {
		for i := k.Add(1) - 1; i < int64(m); i = k.Add(1) - 1 {
			if _, err := kv.Put(ctx, fmt.Sprintf("s%d.m%d", i/int64(per), i%int64(per)), raws[1+int(i)%(len(raws)-1)]); err != nil {
				return err
			}
		}
		return nil
	})
}

// fillSessions writes m messages as sessions of per: each created with its
// first message, then appended to one message at a time, by 64 runtimes.
func fillSessions(ctx context.Context, svc *sessions.Service, m, per int, pool []session.Message) error {
	var next atomic.Int64
	return parallel(64, func() error {
		for s := next.Add(1) - 1; s < int64(m/per); s = next.Add(1) - 1 {
			sid := fmt.Sprintf("fill-%d", s)
			if _, err := svc.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o"}, pool[:1]); err != nil {
				return err
			}
			for i := 1; i < per; i++ {
				msg := pool[1+(i-1)%(len(pool)-1)]
				msg.ID = fmt.Sprintf("m%d", i)
				if _, err := svc.Append(ctx, sid, []session.Message{msg}, session.AppendOptions{}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// parallel runs f n times at once and returns the first error.
func parallel(n int, f func() error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fill writes m messages into sessions of per messages each (and the same
// bytes as KV values into a fresh bucket) and measures the subjects and
// bytes a message costs.
func (e *scaleEnv) fill(ctx context.Context, m, per int, pool []session.Message, raws []json.RawMessage) (PerMessage, error) {
	out := PerMessage{Messages: m, Sessions: m / per}
	floor, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_fill", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		return out, err
	}
	if err := fillKV(ctx, floor, m, per, raws); err != nil {
		return out, err
	}
	fs, fb, err := e.streamsState(ctx, []string{"KV_bench_fill"})
	if err != nil {
		return out, err
	}
	s0, b0, err := e.streamsState(ctx, e.storeStreams())
	if err != nil {
		return out, err
	}
	if err := fillSessions(ctx, e.svc, m, per, pool); err != nil {
		return out, err
	}
	s1, b1, err := e.streamsState(ctx, e.storeStreams())
	if err != nil {
		return out, err
	}
	sessionsN := m / per
	written := float64(sessionsN * per)
	out.Messages = int(written)
	out.FloorSubjects = float64(fs) / float64(m)
	out.FloorBytes = float64(fb) / float64(m)
	out.Subjects = float64(s1-s0) / written
	out.Bytes = float64(b1-b0) / written
	out.SubjectsPerSess = float64(s1-s0) / float64(sessionsN)
	bucket, key, _ := e.store.RecordKey(ctx, "fill-0")
	if kv, err := e.js.KeyValue(ctx, bucket); err == nil {
		if v, err := kv.Get(ctx, key); err == nil {
			out.RecordBytes = float64(len(v.Value()))
		}
	}
	return out, nil
}

// memoryPerMessage measures what m messages cost a server's memory, the
// store's way and as KV values, a key each, on a fresh server: its live
// heap after a full collection, once the block caches of the writes have
// expired (nats-server drops a block's cache 10 s after its last use), so
// that what is compared is what the server keeps for the data (its
// index of subjects, the streams' state), not the garbage or the caches of
// the writes. It answers the growth per message of each (0s when the
// server cannot say its heap).
func memoryPerMessage(ctx context.Context, opt ScaleOptions, dir string, m, per int, pool []session.Message, raws []json.RawMessage) (store, floor float64, err error) {
	srv, err := opt.StartServer(ctx, dir, 0)
	if err != nil {
		return 0, 0, err
	}
	defer srv.Stop()
	if srv.Heap == nil {
		return 0, 0, nil
	}
	e, err := newScaleEnv(ctx, srv, opt.Shards, 1)
	if err != nil {
		return 0, 0, err
	}
	defer e.nc.Close()
	kv, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_fill", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		return 0, 0, err
	}
	settled := func() (int64, error) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(11 * time.Second):
		}
		return srv.Heap(ctx)
	}
	h0, err := srv.Heap(ctx)
	if err != nil {
		return 0, 0, err
	}
	if err := fillKV(ctx, kv, m, per, raws); err != nil {
		return 0, 0, err
	}
	h1, err := settled()
	if err != nil {
		return 0, 0, err
	}
	if err := fillSessions(ctx, e.svc, m, per, pool); err != nil {
		return 0, 0, err
	}
	h2, err := settled()
	if err != nil {
		return 0, 0, err
	}
	return float64(h2-h1) / float64(m/per*per), float64(h1-h0) / float64(m), nil
}

// sweep grows the store to n sessions and measures an idle sweep with
// nothing to delete against reading as many records from a bucket of
// records only; peak server memory growth sampled every 20 ms.
func (e *scaleEnv) sweep(ctx context.Context, n, base int, have *int, pool []session.Message, recordValue []byte, floor jetstream.KeyValue) (SweepRow, error) {
	row := SweepRow{Sessions: n}
	total := n
	n -= base // the idle sessions to have beside the base ones
	if err := e.idleSessions(ctx, *have, n, pool, recordValue, floor); err != nil {
		return row, err
	}
	*have = n
	peak := func(f func() error) (time.Duration, float64, error) { return peakOf(e.srv.PID, f) }
	floorTook, _, err := peak(func() error {
		w, err := floor.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return err
		}
		defer w.Stop()
		seen := 0
		for e := range w.Updates() {
			if e == nil {
				break
			}
			var r struct {
				UpdatedAt time.Time `json:"updated_at"`
			}
			_ = json.Unmarshal(e.Value(), &r)
			seen++
		}
		if seen != total {
			return fmt.Errorf("floor read %d records of %d", seen, total)
		}
		return nil
	})
	if err != nil {
		return row, err
	}
	took, growth, err := peak(func() error {
		deleted, err := e.store.Sweep(ctx, 100*365*24*time.Hour)
		if err == nil && len(deleted) > 0 {
			err = fmt.Errorf("the sweep deleted %d sessions", len(deleted))
		}
		return err
	})
	if err != nil {
		return row, err
	}
	row.SweepMS = float64(took) / float64(time.Millisecond)
	row.FloorMS = float64(floorTook) / float64(time.Millisecond)
	row.Ratio = row.SweepMS / row.FloorMS
	row.PeakGrowthMB = growth
	row.PerSessionUS = row.SweepMS * 1000 / float64(total)
	return row, nil
}

// idleSessions creates the idle sessions from to n (64 at once), and
// their records in the floor's bucket.
func (e *scaleEnv) idleSessions(ctx context.Context, from, n int, pool []session.Message, recordValue []byte, floor jetstream.KeyValue) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := next.Add(1) - 1; s < int64(n); s = next.Add(1) - 1 {
				sid := fmt.Sprintf("idle-%d", s)
				if _, err := e.svc.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o"}, pool[:2]); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if _, err := floor.Put(ctx, fmt.Sprintf("_.idle-%d", s), recordValue); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	err, _ := firstErr.Load().(error)
	return err
}

// peakOf runs f and says how long it took and the peak growth of process
// pid's resident memory meanwhile, in MB (sampled every 20 ms).
func peakOf(pid int, f func() error) (time.Duration, float64, error) {
	_, before := procStat(pid)
	var top atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			_, rss := procStat(pid)
			if rss > top.Load() {
				top.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	start := time.Now()
	err := f()
	took := time.Since(start)
	close(stop)
	<-sampled
	return took, float64(max(top.Load()-before, 0)) / (1 << 20), err
}

// RunScale runs the scale benchmark.
func RunScale(ctx context.Context, opt ScaleOptions) (*ScaleReport, error) {
	opt.defaults()
	rep := &ScaleReport{Machine: machine(), Started: time.Now().UTC(), Shards: opt.Shards}
	p := func(format string, a ...any) { fmt.Fprintf(opt.Progress, format+"\n", a...) }
	pool, raws, avg, err := appendPool(4000)
	if err != nil {
		return nil, err
	}
	rep.MsgBytes = avg
	dir, err := os.MkdirTemp("", "compactor-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	srv, err := opt.StartServer(ctx, filepath.Join(dir, "one"), 0)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	rep.Separate = srv.PID != 0
	e, err := newScaleEnv(ctx, srv, opt.Shards, 1)
	if err != nil {
		return nil, err
	}
	defer e.nc.Close()
	for _, c := range opt.Runtimes {
		row, err := e.appendRun(ctx, fmt.Sprintf("a%d", c), c, opt.AppendFor, pool, raws)
		if err != nil {
			return nil, fmt.Errorf("appends x%d: %w", c, err)
		}
		p("appends x%-2d: %.0f/s against %.0f KV puts/s: %.2f; server %.3f ms/op (floor %.3f), service %.3f ms (floor client %.3f)",
			c, row.Appends, row.Floor, row.Ratio, row.ServerMS, row.FloorServerMS, row.ServiceMS, row.FloorClientMS)
		rep.Appends = append(rep.Appends, row)
	}
	if err := e.storage(ctx, opt, rep, dir, pool, raws, p); err != nil {
		return nil, err
	}
	for i, sync := range []time.Duration{0, time.Second} {
		rows, lengths, err := endpointRows(ctx, filepath.Join(dir, fmt.Sprint("endpoint-", i)), opt, sync, pool, raws, p)
		if err != nil {
			return nil, fmt.Errorf("appends through the endpoint: %w", err)
		}
		rep.Endpoint = append(rep.Endpoint, rows...)
		if sync > 0 {
			rep.Lengths = lengths
		}
	}
	if rep.Durability, err = durability(ctx, dir, opt, pool, raws, p); err != nil {
		return nil, fmt.Errorf("durability: %w", err)
	}
	if err := moreRuns(ctx, opt, rep, dir, pool, raws, p); err != nil {
		return nil, err
	}
	rep.Sizing, rep.SizingFor = sizing(rep)
	rep.Goals = scaleGoals(rep)
	rep.Seconds = time.Since(rep.Started).Seconds()
	return rep, nil
}

// storage measures what a message costs (subjects, bytes, the server's
// memory) and the idle sweep against reading records only.
func (e *scaleEnv) storage(ctx context.Context, opt ScaleOptions, rep *ScaleReport, dir string, pool []session.Message, raws []json.RawMessage, p func(string, ...any)) (err error) {
	if rep.PerMsg, err = e.fill(ctx, opt.Fill, 100, pool, raws); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	if rep.Separate {
		pm := &rep.PerMsg
		if pm.ServerMemory, pm.FloorMemory, err = memoryPerMessage(ctx, opt, filepath.Join(dir, "memory"), opt.Fill, 100, pool, raws); err != nil {
			return fmt.Errorf("memory per message: %w", err)
		}
		pm.MemoryMeasurable = true
		if pm.FloorMemory > 0 {
			pm.MemoryRatio = pm.ServerMemory / pm.FloorMemory
		}
	}
	p("per message: %.3f subjects (KV %.0f), %.0f bytes (KV %.0f), server memory %.0f B (KV %.0f B)",
		rep.PerMsg.Subjects, rep.PerMsg.FloorSubjects, rep.PerMsg.Bytes, rep.PerMsg.FloorBytes, rep.PerMsg.ServerMemory, rep.PerMsg.FloorMemory)
	recBucket, recKey, _ := e.store.RecordKey(ctx, "fill-0")
	recKV, err := e.js.KeyValue(ctx, recBucket)
	if err != nil {
		return err
	}
	recEntry, err := recKV.Get(ctx, recKey)
	if err != nil {
		return err
	}
	floorRecs, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "bench_records", History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		return err
	}
	// The sweep floor: the fill's sessions are records too.
	have := 0
	for i := range rep.PerMsg.Sessions {
		if _, err := floorRecs.Put(ctx, fmt.Sprintf("_.fill-%d", i), recEntry.Value()); err != nil {
			return err
		}
	}
	for _, n := range opt.Sweeps {
		row, err := e.sweep(ctx, n, rep.PerMsg.Sessions, &have, pool, recEntry.Value(), floorRecs)
		if err != nil {
			return fmt.Errorf("sweep %d: %w", n, err)
		}
		p("sweep of %d sessions: %.0f ms against %.0f ms reading records only: %.2f; peak server memory +%.1f MB",
			n, row.SweepMS, row.FloorMS, row.Ratio, row.PeakGrowthMB)
		rep.Sweeps = append(rep.Sweeps, row)
	}
	return nil
}

// moreRuns measures compactions per second, three nodes against one and
// eval through the service, as opt asks.
func moreRuns(ctx context.Context, opt ScaleOptions, rep *ScaleReport, dir string, pool []session.Message, raws []json.RawMessage, p func(string, ...any)) (err error) {
	if opt.Compactions > 0 {
		ce, err := startEnv(ctx, 32)
		if err != nil {
			return err
		}
		row, err := ce.throughput(ctx, 16, opt.Compactions, opt.Progress)
		ce.close()
		if err != nil {
			return fmt.Errorf("compactions: %w", err)
		}
		rep.Compact = &row
	}
	if opt.Cluster {
		if rep.Cluster, err = clusterRun(ctx, filepath.Join(dir, "cluster"), opt, pool, raws, p); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	if len(opt.Conversations) > 0 {
		if rep.Eval, err = evalRun(ctx, opt.Conversations, opt.EvalLimit); err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		p("eval of %d sessions at %d tokens: %.1f s through the service against %.1f s in process: %.2f; compactions %d and %d",
			rep.Eval.Sessions, rep.Eval.Limit, rep.Eval.ServiceS, rep.Eval.InProcessS, rep.Eval.Ratio, rep.Eval.ServiceCompactions, rep.Eval.InProcessCompactions)
	}
	return nil
}

// DurabilityRow is what one way of syncing the store costs: 8 runtimes
// appending, against raw KV puts, on one node.
type DurabilityRow struct {
	// Sync is "always" (fsync after every write: an acknowledged write is
	// on disk) or the interval (the writes of the last interval are lost
	// in a power loss or kernel panic).
	Sync    string  `json:"sync"`
	Floor   float64 `json:"kv_puts_per_s"`
	Appends float64 `json:"appends_per_s"`
}

// durabilitySyncs are the ways of syncing measured: after every write
// (nats.conf and the embedded server), every second (a cluster's nodes,
// deploy/nats-cluster.conf), and nats-server's default, every 2 minutes.
var durabilitySyncs = []time.Duration{0, time.Second, 2 * time.Minute}

// durability measures 8 runtimes appending, and raw KV puts, on a fresh
// node for each way of syncing its store.
func durability(ctx context.Context, dir string, opt ScaleOptions, pool []session.Message, raws []json.RawMessage, p func(string, ...any)) ([]DurabilityRow, error) {
	var rows []DurabilityRow
	for i, sync := range durabilitySyncs {
		srv, err := opt.StartServer(ctx, filepath.Join(dir, fmt.Sprint("sync-", i)), sync)
		if err != nil {
			return nil, err
		}
		e, err := newScaleEnv(ctx, srv, opt.Shards, 1)
		if err != nil {
			srv.Stop()
			return nil, err
		}
		row, err := e.appendRun(ctx, fmt.Sprint("d", i), 8, opt.AppendFor, pool, raws)
		e.nc.Close()
		srv.Stop()
		if err != nil {
			return nil, err
		}
		name := "always"
		if sync > 0 {
			name = sync.String()
		}
		rows = append(rows, DurabilityRow{Sync: name, Floor: row.Floor, Appends: row.Appends})
		p("sync %s: %.0f appends/s, %.0f KV puts/s (8 runtimes)", name, row.Appends, row.Floor)
	}
	return rows, nil
}

// clusterRun measures 64 runtimes appending on one node and on a
// three-node cluster (R3, leaders balanced), both with the same shards,
// in this process. (R1 on three nodes is not measured: the meta leader
// placed every R1 stream on one node, and a stream's placement takes
// server tags, not a server.)
func clusterRun(ctx context.Context, dir string, opt ScaleOptions, pool []session.Message, raws []json.RawMessage, p func(string, ...any)) (*ClusterRow, error) {
	const c = 64
	row := &ClusterRow{Runtimes: c}
	// Synced as the cluster's nodes are, so the two differ by replication
	// alone.
	one, err := inProcessServer(ctx, filepath.Join(dir, "one"), embedded.ClusterSyncInterval)
	if err != nil {
		return nil, err
	}
	e1, err := newScaleEnv(ctx, one, opt.Shards, 1)
	if err != nil {
		one.Stop()
		return nil, err
	}
	r1, err := e1.appendRun(ctx, "one", c, opt.AppendFor, pool, raws)
	e1.nc.Close()
	one.Stop()
	if err != nil {
		return nil, err
	}
	row.OneNode = r1.Appends
	run, err := threeNodes(ctx, filepath.Join(dir, "three"), opt, 3, c, pool, raws)
	if err != nil {
		return nil, fmt.Errorf("three nodes: %w", err)
	}
	run.Ratio = run.Appends / row.OneNode
	total := 0
	for _, n := range run.PerNode {
		total += n
		run.Busiest = max(run.Busiest, n)
	}
	if total > 0 {
		run.Imbalance = float64(run.Busiest) / (float64(total) / 3)
	}
	row.Replicated = run
	p("cluster x%d: one node %.0f appends/s, three nodes (R3) %.0f/s: %.2f; leaders on %d nodes %v; appends per leader node %v (busiest %.2fx its share)",
		c, row.OneNode, run.Appends, run.Ratio, run.Nodes, run.Leaders, run.PerNode, run.Imbalance)
	return row, nil
}

// threeNodes measures c runtimes appending on a new three-node cluster
// whose shards have replicas copies, their leaders balanced.
func threeNodes(ctx context.Context, dir string, opt ScaleOptions, replicas, c int, pool []session.Message, raws []json.RawMessage) (NodesRun, error) {
	run := NodesRun{Replicas: replicas, Leaders: map[string]int{}, PerNode: map[int]int{}}
	cl, err := embedded.StartCluster(3, dir)
	if err != nil {
		return run, err
	}
	defer cl.Shutdown()
	var e *scaleEnv
	for try := 0; ; try++ { // a new cluster may still be placing its first assets
		pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		e, err = newScaleEnv(pctx, &Server{URL: cl.URLs()}, opt.Shards, replicas)
		cancel()
		if err == nil || try == 10 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		return run, err
	}
	defer e.nc.Close()
	time.Sleep(2 * time.Second) // leaders settle after the stepdowns
	nodes := map[int]bool{}
	for n := range opt.Shards {
		for _, name := range []string{kvstore.DataStream(n), "KV_" + kvstore.RecordsBucket(n)} {
			l := cl.StreamLeader(name)
			run.Leaders[name] = l + 1
			nodes[l] = true
		}
	}
	run.Nodes = len(nodes)
	r, err := e.appendRun(ctx, fmt.Sprintf("r%d", replicas), c, opt.AppendFor, pool, raws)
	if err != nil {
		return run, err
	}
	run.Appends, run.Floor = r.Appends, r.Floor
	for n, count := range r.PerShardAppends {
		run.PerNode[run.Leaders[kvstore.DataStream(n)]] += count
	}
	return run, nil
}

// sizing applies the measured per-unit figures to 10^4, 10^5 and 10^6
// live sessions of 10^3 messages.
func sizing(rep *ScaleReport) ([]SizingRow, string) {
	const (
		msgsPerSession = 1000
		appendsPerS    = 1.0 / 15 // a live session appends a message every 15 s
		coresPerNode   = 16
		memPerNodeGB   = 64
		diskPerNodeGB  = 2000
		replicas       = 3
		sweepEvery     = 300.0 // seconds
	)
	// What an R3 append costs the cluster against an R1 one: one node's
	// appends against three nodes' on the same cores (both CPU-bound
	// here); 3 (every replica doing a leader's work) when not measured.
	r3, r3From := 3.0, "assumed 3x an R1 append's server CPU"
	if c := rep.Cluster; c != nil && c.Replicated.Appends > 0 {
		r3 = max(1, c.OneNode/c.Replicated.Appends)
		r3From = fmt.Sprintf("%.2fx an R1 append's server CPU, from the three-node run", r3)
	}
	assume := fmt.Sprintf("each live session holds 10^3 messages and appends one every 15 s; nodes of %d cores, %d GB of memory and %d GB of disk; R3, each node holding 3/N of the data; an R3 append %s; the sweep every 5 minutes", coresPerNode, memPerNodeGB, diskPerNodeGB, r3From)
	last := rep.Appends[len(rep.Appends)-1]
	serverMS := last.ServerMS
	if serverMS == 0 { // the server shared this process: the whole
		serverMS = last.ServiceMS
	}
	perShard := last.Appends // what one node's shards took at once, measured
	var perSessSweepUS float64
	if n := len(rep.Sweeps); n > 0 {
		perSessSweepUS = rep.Sweeps[n-1].PerSessionUS
	}
	mem := rep.PerMsg.ServerMemory
	if mem <= 0 {
		mem = rep.PerMsg.Bytes // no separate process: at least the bytes
	}
	ceil := func(f float64) int { return int(math.Ceil(f)) }
	var out []SizingRow
	for _, s := range []int{10_000, 100_000, 1_000_000} {
		r := SizingRow{Sessions: s, Messages: float64(s) * msgsPerSession, AppendsPerS: float64(s) * appendsPerS}
		r.DiskGB = r.Messages * rep.PerMsg.Bytes / 1e9
		r.MemoryGB = r.Messages * mem / 1e9
		r.ServerCores = r.AppendsPerS * serverMS / 1000 * r3
		r.ServiceCores = r.AppendsPerS * last.ServiceMS / 1000
		byCPU := ceil(r.ServerCores / coresPerNode)
		byMem := ceil(replicas * r.MemoryGB / memPerNodeGB)
		byDisk := ceil(replicas * r.DiskGB / diskPerNodeGB)
		r.Nodes = max(replicas, byCPU, byMem, byDisk)
		// Enough shards for the appends, and at least one leader a node.
		r.Shards = max(r.Nodes, int(r.AppendsPerS/max(perShard/float64(rep.Shards), 1))+1)
		r.SweepS = float64(s) * perSessSweepUS / 1e6
		switch {
		case r.Nodes == replicas:
			r.Limit = fmt.Sprintf("none: the 3-node minimum for R3 holds it (each node at %.0f%% of its disk, %.0f%% of its memory)",
				100*r.DiskGB/diskPerNodeGB, 100*r.MemoryGB/memPerNodeGB)
		case r.Nodes == byDisk:
			r.Limit = "disk"
		case r.Nodes == byMem:
			r.Limit = "server memory"
		default:
			r.Limit = "server CPU for appends"
		}
		if r.SweepS > sweepEvery/2 {
			r.Limit += fmt.Sprintf("; the sweep takes %.0f s of its %.0f s period", r.SweepS, sweepEvery)
		}
		out = append(out, r)
	}
	return out, assume
}

func scaleGoals(rep *ScaleReport) []Goal {
	var goals []Goal
	add := func(what, want, got string, met bool) {
		goals = append(goals, Goal{What: what, Want: want, Got: got, Met: met})
	}
	for _, a := range rep.Appends {
		if a.Runtimes >= 8 {
			add(fmt.Sprintf("appends at %d runtimes against raw KV puts", a.Runtimes), ">= 0.5x", fmt.Sprintf("%.2fx", a.Ratio), a.Ratio >= 0.5)
		}
	}
	for _, e := range rep.Endpoint {
		if e.Runtimes >= 8 && e.Sync != "always" {
			add(fmt.Sprintf("appends through compactor.session.append at %d runtimes against raw KV puts, sessions below prepare_at (sync %s)", e.Runtimes, e.Sync), ">= 0.5x",
				fmt.Sprintf("%.2fx (%.0f against %.0f/s)", e.BelowRatio, e.Below, e.Floor), e.BelowRatio >= 0.5)
			add(fmt.Sprintf("the same, sessions passing prepare_at (sync %s)", e.Sync), ">= 0.3x",
				fmt.Sprintf("%.2fx (%.0f/s, %d prepared)", e.PassingRatio, e.Passing, e.Prepared), e.PassingRatio >= 0.3)
		}
	}
	if n := len(rep.Lengths); n > 1 {
		first, last := rep.Lengths[0], rep.Lengths[n-1]
		flat := last.MSPer / first.MSPer
		add(fmt.Sprintf("an append's time at %d messages in the session against at %d", last.Messages, first.Messages), "<= 1.5x",
			fmt.Sprintf("%.2fx (%.3f against %.3f ms)", flat, last.MSPer, first.MSPer), flat <= 1.5)
	}
	if rep.Separate && len(rep.Appends) > 0 {
		worst := slices.MaxFunc(rep.Appends, func(a, b AppendRow) int { return cmp.Compare(a.ServerMS, b.ServerMS) })
		add("nats-server CPU per append", "<= 0.3 ms", fmt.Sprintf("%.3f ms (at %d runtimes)", worst.ServerMS, worst.Runtimes), worst.ServerMS <= 0.3)
	}
	add("stream subjects per message", "<= 1.2", fmt.Sprintf("%.3f", rep.PerMsg.Subjects), rep.PerMsg.Subjects <= 1.2)
	if p := rep.PerMsg; p.MemoryMeasurable && p.FloorMemory > 0 {
		add("nats-server memory per message against the KV floor", "<= 1.5x", fmt.Sprintf("%.2fx (%.0f B against %.0f B)", p.MemoryRatio, p.ServerMemory, p.FloorMemory), p.MemoryRatio <= 1.5)
	} else if p.MemoryMeasurable {
		// The server's resident memory did not grow while the floor wrote
		// (its heap had room): no ratio to judge, and no goal met.
		add("nats-server memory per message against the KV floor", "<= 1.5x", fmt.Sprintf("not measured: the floor grew the server's resident memory by %.0f B a message (%.0f B for the store)", p.FloorMemory, p.ServerMemory), false)
	}
	if n := len(rep.Sweeps); n > 0 {
		last := rep.Sweeps[n-1]
		add(fmt.Sprintf("sweep at %d sessions against reading records only", last.Sessions), "<= 2x", fmt.Sprintf("%.2fx", last.Ratio), last.Ratio <= 2)
		if rep.Separate {
			add("peak server memory growth during the sweep", "<= 200 MB", fmt.Sprintf("%.1f MB", last.PeakGrowthMB), last.PeakGrowthMB <= 200)
		}
		if n > 1 {
			first := rep.Sweeps[0]
			lin := last.PerSessionUS / first.PerSessionUS
			add("sweep linear in sessions (time per session, largest against smallest)", "<= 2x", fmt.Sprintf("%.2fx", lin), lin <= 2)
		}
	}
	if rep.Compact != nil {
		add("compactions per second against the floor, instant model", ">= 0.8x", fmt.Sprintf("%.2fx", rep.Compact.InstantRatio), rep.Compact.InstantRatio >= 0.8)
	}
	if c := rep.Cluster; c != nil {
		r := c.Replicated
		add("three nodes: leaders on every node", "3 nodes", fmt.Sprintf("%d nodes", r.Nodes), r.Nodes == 3)
		if rep.Machine.Cores >= 6 {
			add("three nodes' appends against one node's", ">= 1x", fmt.Sprintf("%.2fx", r.Ratio), r.Ratio >= 1)
		} else {
			// The terms: with the nodes sharing fewer cores than
			// two each, the leader spread and the per-leader load show
			// whether the cluster would scale, not its throughput here.
			add(fmt.Sprintf("three nodes on %d cores: appends per leader node, the busiest against an even third", rep.Machine.Cores), "<= 1.5x", fmt.Sprintf("%.2fx (%s; throughput %.2fx one node's, the nodes sharing the cores)", r.Imbalance, perNodeText(r.PerNode), r.Ratio), r.Imbalance <= 1.5)
		}
	}
	if ev := rep.Eval; ev != nil {
		add("eval through the service against in process", "<= 2x", fmt.Sprintf("%.2fx (%.1f s against %.1f s, %d sessions)", ev.Ratio, ev.ServiceS, ev.InProcessS, ev.Sessions), ev.Ratio <= 2)
		add("eval through the service asks for the compactions in process does", "the same", fmt.Sprintf("%d and %d", ev.ServiceCompactions, ev.InProcessCompactions), ev.ServiceCompactions == ev.InProcessCompactions)
	}
	return goals
}
