package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/tenant"
)

// NoisyOptions size a noisy-neighbour run: on a nats-server started with
// the repo's nats.conf (the compactor's account and the tenants TENANT_A
// and TENANT_B, users tenant-a and tenant-b), one `compactor serve`
// replica with quotas for tenant A; tenant B's runtimes compact their
// sessions at a steady pace, alone and then while tenant A floods the
// service with requests far over its quotas.
type NoisyOptions struct {
	Binary string
	// NATSConf is the nats-server configuration with the accounts
	// (default nats.conf); its listen address and store are replaced.
	NATSConf string
	// Phase is how long B runs alone, and again beside A (default 30 s
	// each, after a 5 s warm-up).
	Phase time.Duration
	// Quiet is how many runtimes tenant B runs (default 8); Flood how
	// many requests per second tenant A sends (default 200, ten times its
	// requests_per_second quota).
	Quiet, Flood int
	// ModelDelay is how long the model takes to answer (default 300 ms).
	ModelDelay time.Duration
	Progress   io.Writer
}

func (o *NoisyOptions) defaults() {
	if o.NATSConf == "" {
		o.NATSConf = "nats.conf"
	}
	if o.Phase <= 0 {
		o.Phase = 30 * time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = 8
	}
	if o.Flood <= 0 {
		o.Flood = 200
	}
	if o.ModelDelay <= 0 {
		o.ModelDelay = 300 * time.Millisecond
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// noisyLimits are tenant A's quotas in the run.
var noisyLimits = tenant.Limits{RequestsPerSecond: 20, RequestsBurst: 20, ConcurrentCompactions: 4}

// noisyGoal: beside the flood, B's p99 is at most this much over its p99
// alone.
const noisyGoal = 1.2

// NoisyReport is what a noisy-neighbour run found.
type NoisyReport struct {
	Quiet      int           `json:"quiet_runtimes"`
	Flood      int           `json:"flood_requests_per_second"`
	Phase      time.Duration `json:"phase"`
	ModelDelay time.Duration `json:"model_delay"`
	Limits     tenant.Limits `json:"tenant_a_limits"`
	// Alone and Beside are B's compactions (request to result) in each
	// phase.
	Alone  Latencies `json:"alone"`
	Beside Latencies `json:"beside"`
	// Ratio is Beside.P99 / Alone.P99.
	Ratio float64 `json:"p99_ratio"`
	// Unprotected is B beside the same flood with A's quotas lifted (the
	// control), UnprotectedRatio its p99 over B's alone, and
	// UnprotectedSent / UnprotectedStored A's requests then.
	Unprotected       Latencies `json:"unprotected"`
	UnprotectedRatio  float64   `json:"unprotected_p99_ratio"`
	UnprotectedSent   int64     `json:"unprotected_sent"`
	UnprotectedStored int64     `json:"unprotected_stored"`
	// UnprotectedFailed are A's requests then without a result within
	// 30 s (the service behind) or failed.
	UnprotectedFailed int64 `json:"unprotected_failed"`
	// A's flood: requests sent, stored (within its quotas) and answered,
	// refused by quota, and failed otherwise.
	FloodSent     int64            `json:"flood_sent"`
	FloodStored   int64            `json:"flood_stored"`
	FloodRefused  map[string]int64 `json:"flood_refused"`
	FloodFailed   int64            `json:"flood_failed"`
	QuietFailures int64            `json:"quiet_failures"`
	Errors        []string         `json:"errors,omitempty"`
}

// Latencies sum up one phase's compactions.
type Latencies struct {
	N   int           `json:"n"`
	P50 time.Duration `json:"p50"`
	P99 time.Duration `json:"p99"`
	Max time.Duration `json:"max"`
}

func latencies(d []time.Duration) Latencies {
	if len(d) == 0 {
		return Latencies{}
	}
	slices.Sort(d)
	at := func(q float64) time.Duration { return d[min(len(d)-1, int(q*float64(len(d))))] }
	return Latencies{N: len(d), P50: at(0.50), P99: at(0.99), Max: d[len(d)-1]}
}

// Pass reports whether B's p99 beside the flood is within the goal, every
// B compaction succeeded, and the quotas refused A's excess.
func (r NoisyReport) Pass() bool {
	return r.Alone.N > 0 && r.Beside.N > 0 && r.Ratio <= noisyGoal && r.QuietFailures == 0 && len(r.Errors) == 0 && r.FloodRefused[tenant.QuotaRequestsPerSecond]+r.FloodRefused[tenant.QuotaConcurrentCompactions] > 0
}

// noisy is one run.
type noisy struct {
	o   NoisyOptions
	dir string
	url func(user, pass string) string

	mu     sync.Mutex
	errors []string

	sent, stored, failed, quietFailed atomic.Int64
	refused                           sync.Map // quota -> *atomic.Int64
}

func (n *noisy) logf(format string, args ...any) {
	fmt.Fprintf(n.o.Progress, "noisy: "+format+"\n", args...)
}

func (n *noisy) fail(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.errors) < 20 {
		n.errors = append(n.errors, err.Error())
	}
}

// RunNoisy runs tenant B alone, then beside tenant A's flood, and reports
// B's latencies and what A's quotas refused.
func RunNoisy(ctx context.Context, o NoisyOptions) (*NoisyReport, error) {
	o.defaults()
	if o.Binary == "" {
		return nil, errors.New("chaos: the compactor binary is required")
	}
	dir, err := os.MkdirTemp("", "compactor-noisy-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	n := &noisy{o: o, dir: dir}

	opts, err := server.ProcessConfigFile(o.NATSConf)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", o.NATSConf, err)
	}
	opts.Host, opts.Port, opts.StoreDir = "127.0.0.1", -1, filepath.Join(dir, "js")
	opts.NoLog, opts.NoSigs = true, true
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, err
	}
	srv.Start()
	defer srv.Shutdown()
	if !srv.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("nats-server not ready")
	}
	n.url = func(user, pass string) string {
		return strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+pass+"@", 1)
	}
	admin, err := nats.Connect(n.url("admin", "admin-secret"))
	if err != nil {
		return nil, fmt.Errorf("connect as admin (%s's operator user): %w", o.NATSConf, err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = app.ProvisionAll(pctx, admin, js, app.Provisioning{})
	cancel()
	if err != nil {
		return nil, err
	}
	fp, err := fakeprovider.Start(func(string) fakeprovider.Action { return fakeprovider.Action{Delay: o.ModelDelay} })
	if err != nil {
		return nil, err
	}
	defer fp.Close()
	stop, reload, err := n.serve(fp.URL)
	if err != nil {
		return nil, err
	}
	defer stop()

	a, err := n.client("tenant-a", "tenant-a-secret")
	if err != nil {
		return nil, err
	}
	b, err := n.client("tenant-b", "tenant-b-secret")
	if err != nil {
		return nil, err
	}
	if err := n.waitServing(ctx, b); err != nil {
		return nil, err
	}
	n.logf("warming up")
	n.quiet(ctx, b, min(5*time.Second, o.Phase), "warm")
	n.logf("tenant B alone for %s (%d runtimes)", o.Phase, o.Quiet)
	alone := n.quiet(ctx, b, o.Phase, "alone")
	n.logf("tenant B beside tenant A's flood of %d requests/s for %s", o.Flood, o.Phase)
	floodCtx, stopFlood := context.WithCancel(ctx)
	var fw sync.WaitGroup
	fw.Add(1)
	go func() { defer fw.Done(); n.flood(floodCtx, a) }()
	time.Sleep(min(2*time.Second, o.Phase/2)) // the flood under way
	beside := n.quiet(ctx, b, o.Phase, "beside")
	stopFlood()
	fw.Wait()
	sent, stored, failed, refused := n.sent.Load(), n.stored.Load(), n.failed.Load(), n.refusedCounts()

	// The control: the same flood with A's quotas lifted (the config
	// reloaded on SIGHUP), to show what they keep off B.
	n.logf("tenant B beside the same flood, tenant A's quotas lifted, for %s", o.Phase)
	if err := reload(nil); err != nil {
		return nil, err
	}
	floodCtx, stopFlood = context.WithCancel(ctx)
	fw.Add(1)
	go func() { defer fw.Done(); n.flood(floodCtx, a) }()
	time.Sleep(min(2*time.Second, o.Phase/2))
	unprotected := n.quiet(ctx, b, o.Phase, "open")
	stopFlood()
	fw.Wait()

	rep := &NoisyReport{Quiet: o.Quiet, Flood: o.Flood, Phase: o.Phase, ModelDelay: o.ModelDelay, Limits: noisyLimits,
		Alone: latencies(alone), Beside: latencies(beside), Unprotected: latencies(unprotected), FloodSent: sent, FloodStored: stored,
		FloodFailed: failed, UnprotectedFailed: n.failed.Load() - failed, QuietFailures: n.quietFailed.Load(), FloodRefused: refused,
		UnprotectedStored: n.stored.Load() - stored, UnprotectedSent: n.sent.Load() - sent}
	if rep.Alone.P99 > 0 {
		rep.Ratio = float64(rep.Beside.P99) / float64(rep.Alone.P99)
		rep.UnprotectedRatio = float64(rep.Unprotected.P99) / float64(rep.Alone.P99)
	}
	n.mu.Lock()
	rep.Errors = slices.Clone(n.errors)
	n.mu.Unlock()
	return rep, nil
}

func (n *noisy) refusedCounts() map[string]int64 {
	out := map[string]int64{}
	n.refused.Range(func(k, v any) bool { out[k.(string)] = v.(*atomic.Int64).Load(); return true })
	return out
}

// serve starts the replica, with tenant A's quotas in its config file;
// reload writes other limits there and has the replica read them again
// (SIGHUP).
func (n *noisy) serve(model string) (stop func(), reload func(map[string]tenant.Limits) error, err error) {
	path := filepath.Join(n.dir, "config.json")
	write := func(limits map[string]tenant.Limits) error {
		cfg, _ := json.Marshal(map[string]any{"tenants": limits})
		return os.WriteFile(path, cfg, 0o600)
	}
	if err := write(map[string]tenant.Limits{"TENANT_A": noisyLimits}); err != nil {
		return nil, nil, err
	}
	logf, err := os.OpenFile(filepath.Join(n.dir, "replica.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(n.o.Binary, "serve", "--nats-url", n.url("compactor", "compactor-secret"), "--provision=false", "--config", path,
		"--provider", "openai", "--base-url", model, "--summary-model", "gpt-4o-mini", "--metrics-addr", "", "--log-format", "json",
		"--log-level", "warn", "--shutdown-grace", "5s")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, fmt.Errorf("start the replica: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	stop = func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	reload = func(limits map[string]tenant.Limits) error {
		if err := write(limits); err != nil {
			return err
		}
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			return fmt.Errorf("reload the replica's config: %w", err)
		}
		time.Sleep(time.Second) // read on the signal
		return nil
	}
	return stop, reload, nil
}

func (n *noisy) client(user, pass string) (*client.Client, error) {
	nc, err := nats.Connect(n.url(user, pass), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", user, err)
	}
	return client.New(nc, client.WithTimeout(30*time.Second))
}

// waitServing waits until the replica answers a tenant's session call.
func (n *noisy) waitServing(ctx context.Context, c *client.Client) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := c.Create(ctx, "probe", client.NewSession{Messages: []client.Message{client.Text("", client.User, "hello")}})
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the replica does not answer: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noisyLimit is every session's context limit in the run.
const noisyLimit = 1500

// turns is a runtime's next exchanges, enough to take its session over
// noisyLimit again after a compaction.
func turns(sid string, from, k int) []client.Message {
	var out []client.Message
	for i := from; i < from+k; i++ {
		out = append(out,
			client.Text(fmt.Sprintf("%s-u%04d", sid, i), client.User, fmt.Sprintf(
				"[%s turn %d] My booking REF-%s-%d: can I move the flight to day %d, keep seat %dA and add a bag of %d kg?", sid, i, sid, i, i%28+1, i%30+1, 10+i%20)),
			client.Text(fmt.Sprintf("%s-a%04d", sid, i), client.Assistant, fmt.Sprintf(
				"[%s turn %d] Booking REF-%s-%d moved to day %d; seat %dA kept; the bag is added; fare difference $%d.", sid, i, sid, i, i%28+1, i%30+1, 10+i%90)))
	}
	return out
}

// quiet runs tenant B's runtimes for d: each appends turns that take its
// session over the limit, then requests a compaction and waits for its
// result, as a runtime does; it returns the request-to-result times.
func (n *noisy) quiet(ctx context.Context, b *client.Client, d time.Duration, phase string) []time.Duration {
	var mu sync.Mutex
	var out []time.Duration
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range n.o.Quiet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := fmt.Sprintf("b-%s-%02d", phase, i)
			if _, err := b.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: noisyLimit,
				Messages: []client.Message{client.Text("", client.System, "You are a support agent for an airline. Be brief.")}}); err != nil {
				n.fail(fmt.Errorf("B %s: create: %w", sid, err))
				n.quietFailed.Add(1)
				return
			}
			for turn := 0; time.Now().Before(end) && ctx.Err() == nil; turn += 24 {
				if _, err := b.Append(ctx, sid, turns(sid, turn, 24)); err != nil {
					n.fail(fmt.Errorf("B %s: append: %w", sid, err))
					n.quietFailed.Add(1)
					return
				}
				start := time.Now()
				res, err := b.Compact(ctx, sid, client.CompactRequest{RequestID: uuid.NewString(), Model: "gpt-4o", ContextLimit: noisyLimit})
				took := time.Since(start)
				if err != nil {
					n.fail(fmt.Errorf("B %s: compact: %v %+v", sid, err, res))
					n.quietFailed.Add(1)
					continue
				}
				mu.Lock()
				out = append(out, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// flood sends tenant A's requests at o.Flood per second over many
// sessions, each as a runtime would (a request event, then its result),
// without waiting for one before the next.
func (n *noisy) flood(ctx context.Context, a *client.Client) {
	const sessions = 32
	for i := range sessions {
		sid := fmt.Sprintf("a-%02d", i)
		msgs := append([]client.Message{client.Text("", client.System, "You are a support agent.")}, turns(sid, 0, 40)...)
		if _, err := a.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: noisyLimit, Messages: msgs}); err != nil && ctx.Err() == nil {
			n.fail(fmt.Errorf("A %s: create: %w", sid, err))
		}
	}
	tick := time.NewTicker(time.Second / time.Duration(n.o.Flood))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.sent.Add(1)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			// Turns first, so that a request let in compacts (a model
			// call), as a runtime's would.
			sid := fmt.Sprintf("a-%02d", k%sessions)
			if _, err := a.Append(rctx, sid, turns(sid, 1000+k*5, 5)); err != nil {
				n.failed.Add(1)
				n.fail(fmt.Errorf("A %s: append: %w", sid, err))
				return
			}
			_, err := a.Compact(rctx, sid, client.CompactRequest{RequestID: uuid.NewString(), Model: "gpt-4o", ContextLimit: noisyLimit})
			// A failed compaction was stored and answered; a request
			// refused at the door is an error of another kind.
			var failed *client.FailedError
			answered := err == nil || errors.As(err, &failed)
			var qe string
			for _, q := range []string{tenant.QuotaRequestsPerSecond, tenant.QuotaConcurrentCompactions} {
				if !answered && strings.Contains(err.Error(), "quota_exceeded") && strings.Contains(err.Error(), q) {
					qe = q
				}
			}
			switch {
			case qe != "":
				c, _ := n.refused.LoadOrStore(qe, new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
			case !answered:
				n.failed.Add(1)
			default:
				n.stored.Add(1)
			}
		}()
	}
}

// Markdown renders the report.
func (r NoisyReport) Markdown(command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Noisy neighbour\n\nWritten by `%s` (`make chaos`). Do not edit by hand.\n\n", command)
	fmt.Fprintf(&b, "A nats-server with the repo's `nats.conf` (tenants on their own accounts), one `compactor serve` replica, a model answering in %s. "+
		"Tenant B: %d runtimes, each appending turns past its %d-token limit and requesting a compaction (request event to result event), "+
		"for %s alone, then for %s while tenant A sends %d requests per second over 32 sessions, against quotas of %g requests per second (burst %d) and %d concurrent compactions.\n\n",
		r.ModelDelay, r.Quiet, noisyLimit, r.Phase, r.Phase, r.Flood, r.Limits.RequestsPerSecond, r.Limits.RequestsBurst, r.Limits.ConcurrentCompactions)
	b.WriteString("| tenant B | compactions | p50 | p99 | max |\n| --- | ---: | ---: | ---: | ---: |\n")
	for _, row := range []struct {
		name string
		l    Latencies
	}{{"alone", r.Alone}, {"beside A's flood, within A's quotas", r.Beside}, {"beside the same flood, A's quotas lifted (control)", r.Unprotected}} {
		fmt.Fprintf(&b, "| %s | %d | %d ms | %d ms | %d ms |\n", row.name, row.l.N, row.l.P50.Milliseconds(), row.l.P99.Milliseconds(), row.l.Max.Milliseconds())
	}
	mark := "met"
	if !r.Pass() {
		mark = "**missed**"
	}
	fmt.Fprintf(&b, "\nGoal: B's p99 beside the flood within %.0f %% of its p99 alone: %.2fx, %s. Without A's quotas: %.2fx (of A's %d requests, %d answered, %d without a result within 30 s).\n\n",
		(noisyGoal-1)*100, r.Ratio, mark, r.UnprotectedRatio, r.UnprotectedSent, r.UnprotectedStored, r.UnprotectedFailed)
	fmt.Fprintf(&b, "Tenant A within its quotas: %d requests sent, %d stored and answered, refused by quota: %d (requests_per_second), %d (concurrent_compactions); %d failed otherwise. "+
		"Tenant B: %d failures.\n", r.FloodSent, r.FloodStored, r.FloodRefused[tenant.QuotaRequestsPerSecond], r.FloodRefused[tenant.QuotaConcurrentCompactions], r.FloodFailed, r.QuietFailures)
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "\n- error: %s", e)
	}
	return b.String()
}
