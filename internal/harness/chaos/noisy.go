package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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

	"github.com/compactor/compactor/client"
	"github.com/compactor/compactor/internal/app"
	"github.com/compactor/compactor/internal/fakeprovider"
	"github.com/compactor/compactor/internal/tenant"
)

// NoisyOptions size a noisy-neighbour run: on a nats-server started with
// the repo's nats.conf (the compactor's account and the tenants TENANT_A
// and TENANT_B, users tenant-a and tenant-b), two `compactor serve`
// replicas with quotas for tenant A; tenant B's runtimes append to their
// sessions and compact them at a steady pace, alone, then while tenant A
// floods the service with compaction requests far over its quotas, then
// while it floods it with appends; then A writes sessions and bytes as
// fast as its quotas let it, through both replicas, to show how far the
// stored-usage quotas overshoot.
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
	// requests_per_second quota); AppendFlood how many appends per second
	// (default 1,000, twenty times its writes_per_second quota).
	Quiet, Flood, AppendFlood int
	// ModelDelay is how long the model takes to answer (default 300 ms).
	ModelDelay time.Duration
	Progress   io.Writer
}

// rounds is how many turns B alone and beside each flood take: one for
// every 10 s of a phase, at most 3 (a short phase is one turn each).
func (o *NoisyOptions) rounds() int {
	return int(max(1, min(3, o.Phase/(10*time.Second))))
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
	if o.AppendFlood <= 0 {
		o.AppendFlood = 1000
	}
	if o.ModelDelay <= 0 {
		o.ModelDelay = 300 * time.Millisecond
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// noisyLimits are tenant A's quotas in the run (shared by the replicas).
var noisyLimits = tenant.Limits{RequestsPerSecond: 20, RequestsBurst: 20, ConcurrentCompactions: 4,
	WritesPerSecond: 50, WritesBurst: 50, ConcurrentWrites: 4, Sessions: 300, BytesStored: 16 << 20}

// noisyGoal: beside the flood, B's p99 is at most this much over its p99
// alone; quotaGoal: A stores at most this share over its stored-usage
// quotas.
const (
	noisyGoal = 1.2
	quotaGoal = 0.10
)

// floodRateGoal: A's floods send at least this share of their rate (a
// flood the machine starves would spare B for nothing).
const floodRateGoal = 0.9

// perSecond is n over d, a second (0 for no time).
func perSecond(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// floodsKeptRate reports whether both of A's floods sent at least
// floodRateGoal of their rates.
func (r NoisyReport) floodsKeptRate() bool {
	return r.FloodRate >= floodRateGoal*float64(r.Flood) && r.AppendFlood.Rate >= floodRateGoal*float64(r.AppendFlood.PerSecond)
}

// bWait bounds the wait for one of B's results (a longer one is a
// failure, but in the control phase, where it is the harm the quotas
// prevent), and how long a flood goes on past B's phase.
const bWait = 30 * time.Second

// openPhase names the control phase: A's quotas lifted.
const openPhase = "open"

// noisyReplicas is how many serve processes the run starts.
const noisyReplicas = 2

// NoisyReport is what a noisy-neighbour run found.
type NoisyReport struct {
	Quiet      int           `json:"quiet_runtimes"`
	Flood      int           `json:"flood_requests_per_second"`
	Phase      time.Duration `json:"phase"`
	Rounds     int           `json:"rounds"`
	ModelDelay time.Duration `json:"model_delay"`
	Limits     tenant.Limits `json:"tenant_a_limits"`
	// Alone and Beside are B's compactions (request to result) in each
	// phase; AloneAppends and BesideAppends its appends.
	Alone         Latencies `json:"alone"`
	Beside        Latencies `json:"beside"`
	AloneAppends  Latencies `json:"alone_appends"`
	BesideAppends Latencies `json:"beside_appends"`
	// Ratio is Beside.P99 / Alone.P99, AppendRatio likewise for appends.
	Ratio       float64 `json:"p99_ratio"`
	AppendRatio float64 `json:"append_p99_ratio"`
	// AppendFlood is A's append flood and B beside it.
	AppendFlood AppendFloodReport `json:"append_flood"`
	// Quota is A writing as fast as its quotas let it.
	Quota QuotaReport `json:"quota"`
	// Unprotected is B beside the same flood with A's quotas lifted (the
	// control), UnprotectedRatio its p99 over B's alone, and
	// UnprotectedSent / UnprotectedStored A's requests then.
	Unprotected        Latencies `json:"unprotected"`
	UnprotectedAppends Latencies `json:"unprotected_appends"`
	UnprotectedRatio   float64   `json:"unprotected_p99_ratio"`
	// UnprotectedUnanswered are B's requests then without a result
	// within 30 s (counted in Unprotected at that wait).
	UnprotectedUnanswered int64 `json:"unprotected_unanswered,omitempty"`
	UnprotectedSent       int64 `json:"unprotected_sent"`
	UnprotectedStored     int64 `json:"unprotected_stored"`
	// UnprotectedFailed are A's requests then without a result within
	// 30 s (the service behind) or failed.
	UnprotectedFailed int64 `json:"unprotected_failed"`
	// A's flood: requests sent, stored (within its quotas) and answered,
	// refused by quota, and failed otherwise.
	FloodSent    int64            `json:"flood_sent"`
	FloodStored  int64            `json:"flood_stored"`
	FloodRefused map[string]int64 `json:"flood_refused"`
	FloodFailed  int64            `json:"flood_failed"`
	// FloodRate is what A's flood of requests sent a second, as it sent
	// (the flood process at the lowest priority: floodNice).
	FloodRate     float64  `json:"flood_sent_per_second"`
	QuietFailures int64    `json:"quiet_failures"`
	Errors        []string `json:"errors,omitempty"`
}

// AppendFloodReport is tenant B beside tenant A's flood of appends.
type AppendFloodReport struct {
	PerSecond int `json:"per_second"`
	// Compactions and Appends are B's; their ratios are over B's p99
	// alone.
	Compactions     Latencies        `json:"compactions"`
	Appends         Latencies        `json:"appends"`
	CompactionRatio float64          `json:"compaction_p99_ratio"`
	AppendRatio     float64          `json:"append_p99_ratio"`
	Sent            int64            `json:"sent"`
	Stored          int64            `json:"stored"`
	Refused         map[string]int64 `json:"refused"`
	Failed          int64            `json:"failed"`
	// Rate is what A sent a second, as it sent.
	Rate float64 `json:"sent_per_second"`
}

// QuotaReport is how far A's stored usage went over its quotas, writing
// through two replicas as fast as they let it (each replica counts the
// other's writes within a heartbeat).
type QuotaReport struct {
	SessionsQuota int     `json:"sessions_quota"`
	Sessions      int64   `json:"sessions"`
	BytesQuota    int64   `json:"bytes_quota"`
	Bytes         int64   `json:"bytes"`
	SessionsOver  float64 `json:"sessions_over"`
	BytesOver     float64 `json:"bytes_over"`
	// Refused counts the writes refused, by quota.
	Refused map[string]int64 `json:"refused"`
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
	af := r.AppendFlood
	return r.Alone.N > 0 && r.Beside.N > 0 && r.Ratio <= noisyGoal && r.AppendRatio <= noisyGoal && r.QuietFailures == 0 && len(r.Errors) == 0 &&
		r.FloodRefused[tenant.QuotaRequestsPerSecond]+r.FloodRefused[tenant.QuotaConcurrentCompactions] > 0 &&
		af.Compactions.N > 0 && af.CompactionRatio <= noisyGoal && af.AppendRatio <= noisyGoal && af.Refused[tenant.QuotaWritesPerSecond]+af.Refused[tenant.QuotaConcurrentWrites] > 0 &&
		r.Quota.Sessions > 0 && r.Quota.SessionsOver <= quotaGoal && r.Quota.BytesOver <= quotaGoal &&
		r.Quota.Refused[tenant.QuotaSessions] > 0 && r.Quota.Refused[tenant.QuotaBytesStored] > 0 && r.floodsKeptRate()
}

// noisy is one run.
type noisy struct {
	o   NoisyOptions
	dir string
	// serverURL is the server's client URL, url that URL as a user.
	serverURL string
	url       func(user, pass string) string

	mu     sync.Mutex
	errors []string

	sent, stored, failed, quietFailed atomic.Int64
	// unanswered counts B's requests of the control phase without a
	// result within bWait.
	unanswered atomic.Int64
	refused    sync.Map // quota -> *atomic.Int64
	// aSessions and aBytes are what A was told it stored: sessions
	// created, and the text bytes of its messages.
	aSessions, aBytes atomic.Int64
	counted           sync.Map // A's session ids counted in aSessions
	// sending is how long a flood process sent; floodFor and
	// appendFloodFor sum it over the run's floods of each kind.
	sending                  time.Duration
	floodFor, appendFloodFor atomic.Int64
}

// created reports whether A's session sid was counted before, counting it.
func (n *noisy) created(sid string) bool {
	_, loaded := n.counted.LoadOrStore(sid, true)
	return loaded
}

// textBytes is the text size the store counts for msgs
// (session.TextBytes of plain text messages).
func textBytes(msgs []client.Message) int64 {
	var b int64
	for _, m := range msgs {
		b += int64(len(m.Content.Text) + len(m.Name) + len(m.Role))
	}
	return b
}

// quotaOf names the quota an error says was exceeded ("" for another
// error or none): an endpoint's refusal names it in the client's Error, a
// compaction request's in its failure.
func quotaOf(err error) string {
	if ce := (*client.Error)(nil); errors.As(err, &ce) {
		if ce.Quota == "" && ce.Code == 429 {
			return "fair_share" // the endpoints' workers, shared between tenants
		}
		return ce.Quota
	}
	if err == nil || !strings.Contains(err.Error(), string(client.ReasonQuotaExceeded)) {
		return ""
	}
	for _, q := range []string{tenant.QuotaRequestsPerSecond, tenant.QuotaConcurrentCompactions} {
		if strings.Contains(err.Error(), q) {
			return q
		}
	}
	return "other"
}

// appendFlood counts tenant A's append flood.
type appendFlood struct {
	sent, stored, failed atomic.Int64
	mu                   sync.Mutex
	refused              map[string]int64
}

func (f *appendFlood) counts() map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.refused)
}

// paced calls send k = 0, 1, ... at perSecond, each in a goroutine of its
// own (not waiting for one before the next, as a flooding client does),
// until ctx ends, then waits for those under way. It keeps to the rate
// over the whole flood: a tick late (a busy machine) sends every call due
// since (a ticker alone drops the ticks it is late for, and a flood of a
// thousand a second sent 770 to 890). It returns how long it sent.
func paced(ctx context.Context, perSecond int, send func(ctx context.Context, k int)) (span time.Duration) {
	tick := time.NewTicker(max(time.Second/time.Duration(perSecond), time.Millisecond))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	for k := 0; ; {
		select {
		case <-ctx.Done():
			return time.Since(start)
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds()*float64(perSecond)) + 1
		for ; k < due; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				send(rctx, k)
			}(k)
		}
	}
}

// appendFlood sends tenant A's appends (five turns each, over the flood's
// sessions) at o.AppendFlood per second without waiting for answers.
func (n *noisy) appendFlood(ctx context.Context, a *client.Client, f *appendFlood) {
	n.sending = paced(ctx, n.o.AppendFlood, func(rctx context.Context, k int) {
		f.sent.Add(1)
		sid := fmt.Sprintf("a-%02d", k%floodSessions)
		ap, err := a.Append(rctx, sid, turns(sid, 100000+k*5, 5))
		switch q := quotaOf(err); {
		case q != "":
			f.mu.Lock()
			f.refused[q]++
			f.mu.Unlock()
		case err != nil:
			f.failed.Add(1)
			n.fail(fmt.Errorf("A %s: append: %w", sid, err))
		default:
			f.stored.Add(1)
			n.aBytes.Add(int64(ap.Bytes))
		}
	})
}

// quotaPhase has tenant A create sessions, then append large messages, at
// ten times its writes_per_second quota spread over both replicas, each
// until its quota has refused writes for a few seconds; it reports how far
// what A was told it stored went over its sessions and bytes_stored
// quotas.
func (n *noisy) quotaPhase(ctx context.Context, a *client.Client) (QuotaReport, error) {
	rep := QuotaReport{SessionsQuota: noisyLimits.Sessions, BytesQuota: noisyLimits.BytesStored, Refused: map[string]int64{}}
	var mu sync.Mutex
	var refusedAt time.Time
	refuse := func(q string) {
		mu.Lock()
		defer mu.Unlock()
		rep.Refused[q]++
		if q == tenant.QuotaSessions || q == tenant.QuotaBytesStored {
			if refusedAt.IsZero() {
				refusedAt = time.Now()
			}
		}
	}
	until := func(send func(ctx context.Context, k int)) {
		mu.Lock()
		refusedAt = time.Time{}
		mu.Unlock()
		pctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); paced(pctx, int(10*noisyLimits.WritesPerSecond), send) }()
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
			mu.Lock()
			at := refusedAt
			mu.Unlock()
			if !at.IsZero() && time.Since(at) > 3*time.Second {
				break
			}
		}
		stop()
		<-done
	}
	until(func(rctx context.Context, k int) {
		sid := fmt.Sprintf("a-quota-%05d", k)
		msgs := []client.Message{client.Text(sid+"-sys", client.System, "You are a support agent.")}
		c, err := a.Create(rctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: noisyLimit, Messages: msgs})
		switch q := quotaOf(err); {
		case q != "":
			refuse(q)
		case err != nil:
			n.fail(fmt.Errorf("A %s: create: %w", sid, err))
		case c.HeadSeq == 1 && !n.created(sid):
			n.aSessions.Add(1)
			n.aBytes.Add(textBytes(msgs))
		}
	})
	big := strings.Repeat("A tool's long output, kept whole in the session's history. ", 550) // about 32 KB
	until(func(rctx context.Context, k int) {
		sid := fmt.Sprintf("a-%02d", k%floodSessions)
		ap, err := a.Append(rctx, sid, []client.Message{client.Text(fmt.Sprintf("%s-big-%05d", sid, k), client.User, big)})
		switch q := quotaOf(err); {
		case q != "":
			refuse(q)
		case err != nil:
			n.fail(fmt.Errorf("A %s: append: %w", sid, err))
		default:
			n.aBytes.Add(int64(ap.Bytes))
		}
	})
	rep.Sessions, rep.Bytes = n.aSessions.Load(), n.aBytes.Load()
	rep.SessionsOver = float64(rep.Sessions)/float64(rep.SessionsQuota) - 1
	rep.BytesOver = float64(rep.Bytes)/float64(rep.BytesQuota) - 1
	return rep, nil
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

	stop, reload, err := n.setUp(ctx)
	defer stop()
	if err != nil {
		return nil, err
	}

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
	// B alone, beside A's requests and beside A's appends take turns,
	// a share of each phase at a time: what the machine does over the
	// run (its other tenants, its clock) falls on the three alike.
	var alone, beside, besideAppends phaseTimes
	af := &appendFlood{refused: map[string]int64{}}
	rounds := o.rounds()
	slice := o.Phase / time.Duration(rounds)
	for r := range rounds {
		n.logf("round %d of %d: tenant B alone for %s (%d runtimes)", r+1, rounds, slice, o.Quiet)
		alone.add(n.quiet(ctx, b, slice, fmt.Sprintf("alone%d", r)))
		n.logf("round %d of %d: tenant B beside tenant A's flood of %d requests/s for %s", r+1, rounds, o.Flood, slice)
		beside.add(n.beside(ctx, b, n.elsewhere(floodRequests, o.Flood, nil), slice, fmt.Sprintf("beside%d", r)))
		n.logf("round %d of %d: tenant B beside tenant A's flood of %d appends/s for %s", r+1, rounds, o.AppendFlood, slice)
		besideAppends.add(n.beside(ctx, b, n.elsewhere(floodAppends, o.AppendFlood, af), slice, fmt.Sprintf("appends%d", r)))
	}
	sent, stored, failed, refused := n.sent.Load(), n.stored.Load(), n.failed.Load(), n.refusedCounts()
	floodFor := time.Duration(n.floodFor.Load())

	n.logf("tenant A writing sessions and bytes as fast as its quotas let it, through %d replicas", noisyReplicas)
	quota, err := n.quotaPhase(ctx, a)
	if err != nil {
		return nil, err
	}

	// The control: the same flood with A's quotas lifted (the config
	// reloaded on SIGHUP), to show what they keep off B.
	n.logf("tenant B beside the same flood, tenant A's quotas lifted, for %s", o.Phase)
	if err := reload(nil); err != nil {
		return nil, err
	}
	sent2, stored2, failed2 := n.sent.Load(), n.stored.Load(), n.failed.Load()
	unprotected := n.beside(ctx, b, n.elsewhere(floodRequests, o.Flood, nil), o.Phase, openPhase)

	rep := &NoisyReport{Quiet: o.Quiet, Flood: o.Flood, Phase: o.Phase, Rounds: rounds, ModelDelay: o.ModelDelay, Limits: noisyLimits,
		Alone: latencies(alone.compactions), Beside: latencies(beside.compactions), AloneAppends: latencies(alone.appends), BesideAppends: latencies(beside.appends),
		Unprotected: latencies(unprotected.compactions), UnprotectedAppends: latencies(unprotected.appends), FloodSent: sent, FloodStored: stored,
		FloodFailed: failed, UnprotectedFailed: n.failed.Load() - failed2, QuietFailures: n.quietFailed.Load(), FloodRefused: refused,
		UnprotectedStored: n.stored.Load() - stored2, UnprotectedSent: n.sent.Load() - sent2, UnprotectedUnanswered: n.unanswered.Load(), Quota: quota,
		AppendFlood: AppendFloodReport{PerSecond: o.AppendFlood, Compactions: latencies(besideAppends.compactions), Appends: latencies(besideAppends.appends),
			Sent: af.sent.Load(), Stored: af.stored.Load(), Failed: af.failed.Load(), Refused: af.counts(),
			Rate: perSecond(af.sent.Load(), time.Duration(n.appendFloodFor.Load()))},
		FloodRate: perSecond(sent, floodFor)}
	rep.ratios()
	n.mu.Lock()
	rep.Errors = slices.Clone(n.errors)
	n.mu.Unlock()
	return rep, nil
}

// setUp starts the server in a process of its own (`compactor nats
// --config`), as a deployment runs it (in this process it shared the
// run's garbage collector and scheduler with the flood's clients),
// provisions it, and starts the model and the replicas; stop undoes what
// was started (also after an error), reload reloads the replicas' tenant
// limits.
func (n *noisy) setUp(ctx context.Context) (stop func(), reload func(map[string]tenant.Limits) error, err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	o := n.o
	clientURL, stopServer, err := startNATS(ctx, o.Binary, o.NATSConf, filepath.Join(n.dir, "js"), filepath.Join(n.dir, "nats.log"))
	if err != nil {
		return stop, nil, err
	}
	undo = append(undo, stopServer)
	n.setURL(clientURL)
	admin, err := nats.Connect(n.url("admin", "admin-secret"))
	if err != nil {
		return stop, nil, fmt.Errorf("connect as admin (%s's operator user): %w", o.NATSConf, err)
	}
	undo = append(undo, admin.Close)
	js, err := jetstream.New(admin)
	if err != nil {
		return stop, nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = app.ProvisionAll(pctx, admin, js, app.Provisioning{})
	cancel()
	if err != nil {
		return stop, nil, err
	}
	fp, err := fakeprovider.Start(func(string) fakeprovider.Action { return fakeprovider.Action{Delay: o.ModelDelay} })
	if err != nil {
		return stop, nil, err
	}
	undo = append(undo, fp.Close)
	stopReplicas, reload, err := n.serve(fp.URL)
	if err != nil {
		return stop, nil, err
	}
	undo = append(undo, stopReplicas)
	return stop, reload, nil
}

// ratios are tenant B's p99s beside the floods against alone.
func (rep *NoisyReport) ratios() {
	ratio := func(x, y Latencies) float64 {
		if y.P99 <= 0 {
			return 0
		}
		return float64(x.P99) / float64(y.P99)
	}
	rep.Ratio, rep.UnprotectedRatio = ratio(rep.Beside, rep.Alone), ratio(rep.Unprotected, rep.Alone)
	rep.AppendRatio = ratio(rep.BesideAppends, rep.AloneAppends)
	rep.AppendFlood.CompactionRatio = ratio(rep.AppendFlood.Compactions, rep.Alone)
	rep.AppendFlood.AppendRatio = ratio(rep.AppendFlood.Appends, rep.AloneAppends)
}

// setURL sets the server's client URL.
func (n *noisy) setURL(serverURL string) {
	n.serverURL = serverURL
	n.url = func(user, pass string) string {
		return strings.Replace(serverURL, "nats://", "nats://"+user+":"+pass+"@", 1)
	}
}

// floodSession is what tenant A creates a flooded session with.
func floodSession(sid string) []client.Message {
	return append([]client.Message{client.Text("", client.System, "You are a support agent.")}, turns(sid, 0, 40)...)
}

// beside runs tenant B for a phase while flood runs (started a moment
// before, so that it is under way).
//
// The flood ends with B's phase, and at the latest a wait past it
// (bWait): with A's quotas lifted the flood can outrun the replicas,
// and B's last request would wait behind a backlog that grows for as
// long as the flood goes on.
func (n *noisy) beside(ctx context.Context, b *client.Client, flood func(context.Context), d time.Duration, phase string) phaseTimes {
	warm := min(2*time.Second, d/2)
	floodCtx, stopFlood := context.WithTimeout(ctx, warm+d+bWait)
	var fw sync.WaitGroup
	fw.Add(1)
	go func() { defer fw.Done(); flood(floodCtx) }()
	time.Sleep(warm) // the flood under way
	out := n.quiet(ctx, b, d, phase)
	stopFlood()
	fw.Wait()
	return out
}

// startNATS runs `binary nats --config conf` on a free port storing under
// dir, and waits until it accepts clients.
func startNATS(ctx context.Context, binary, conf, dir, logPath string) (url string, stop func(), err error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(binary, "nats", "--config", conf, "--port", "-1", "--data-dir", dir)
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, fmt.Errorf("start the nats-server: %w", err)
	}
	stop = func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait(); logf.Close() }
	ready := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if u, ok := strings.CutPrefix(lines.Text(), "ready "); ok {
				ready <- u
			}
		}
	}()
	select {
	case u := <-ready:
		return u, stop, nil
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	stop()
	return "", nil, fmt.Errorf("the nats-server (%s nats --config %s) did not start within 30 s (log: %s)", binary, conf, logPath)
}

func (n *noisy) refusedCounts() map[string]int64 {
	out := map[string]int64{}
	n.refused.Range(func(k, v any) bool { out[k.(string)] = v.(*atomic.Int64).Load(); return true })
	return out
}

// serve starts the replicas, with tenant A's quotas in their config file;
// reload writes other limits there and has the replicas read them again
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
	type proc struct {
		cmd  *exec.Cmd
		done chan struct{}
	}
	var procs []proc
	stop = func() {
		for _, p := range procs {
			_ = p.cmd.Process.Signal(os.Interrupt)
		}
		for _, p := range procs {
			select {
			case <-p.done:
			case <-time.After(15 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
		}
	}
	for i := range noisyReplicas {
		logf, err := os.OpenFile(filepath.Join(n.dir, fmt.Sprintf("replica-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			stop()
			return nil, nil, err
		}
		cmd := exec.Command(n.o.Binary, "serve", "--nats-url", n.url("compactor", "compactor-secret"), "--provision=false", "--config", path,
			"--provider", "openai", "--base-url", model, "--summary-model", "gpt-4o-mini", "--metrics-addr", "", "--log-format", "json",
			"--log-level", "warn", "--shutdown-grace", "5s")
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.Env = append(os.Environ(), "OPENAI_API_KEY=")
		if err := cmd.Start(); err != nil {
			logf.Close()
			stop()
			return nil, nil, fmt.Errorf("start replica %d: %w", i+1, err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
		procs = append(procs, proc{cmd, done})
	}
	reload = func(limits map[string]tenant.Limits) error {
		if err := write(limits); err != nil {
			return err
		}
		for i, p := range procs {
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				return fmt.Errorf("reload replica %d's config: %w", i+1, err)
			}
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

// phaseTimes are tenant B's times in one phase: request to result of its
// compactions, and its appends.
type phaseTimes struct{ compactions, appends []time.Duration }

// add adds o's times to t's.
func (t *phaseTimes) add(o phaseTimes) {
	t.compactions, t.appends = append(t.compactions, o.compactions...), append(t.appends, o.appends...)
}

// quiet runs tenant B's runtimes for d: each appends turns that take its
// session over the limit, then requests a compaction and waits for its
// result, as a runtime does; it returns the times of both.
func (n *noisy) quiet(ctx context.Context, b *client.Client, d time.Duration, phase string) phaseTimes {
	var mu sync.Mutex
	var out phaseTimes
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
				// A turn at a time (two exchanges), as a runtime appends.
				for k := 0; k < 24; k += 2 {
					start := time.Now()
					if _, err := b.Append(ctx, sid, turns(sid, turn+k, 2)); err != nil {
						n.fail(fmt.Errorf("B %s: append: %w", sid, err))
						n.quietFailed.Add(1)
						return
					}
					took := time.Since(start)
					mu.Lock()
					out.appends = append(out.appends, took)
					mu.Unlock()
				}
				start := time.Now()
				cctx, cancel := context.WithTimeout(ctx, bWait)
				res, err := b.Compact(cctx, sid, client.CompactRequest{RequestID: uuid.NewString(), Model: "gpt-4o", ContextLimit: noisyLimit})
				cancel()
				took := time.Since(start)
				if errors.Is(err, client.ErrNoResult) && phase == openPhase {
					// The control: B unanswered behind A's backlog is
					// what the quotas prevent; counted at its wait.
					n.unanswered.Add(1)
					mu.Lock()
					out.compactions = append(out.compactions, took)
					mu.Unlock()
					return
				}
				if err != nil {
					n.fail(fmt.Errorf("B %s: compact: %v %+v", sid, err, res))
					n.quietFailed.Add(1)
					continue
				}
				mu.Lock()
				out.compactions = append(out.compactions, took)
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
// floodSessions is how many sessions tenant A floods.
const floodSessions = 32

func (n *noisy) flood(ctx context.Context, a *client.Client) {
	const sessions = floodSessions
	for i := range sessions {
		sid := fmt.Sprintf("a-%02d", i)
		msgs := floodSession(sid)
		c, err := a.Create(ctx, sid, client.NewSession{Model: "gpt-4o", ContextLimit: noisyLimit, Messages: msgs})
		if err != nil && ctx.Err() == nil {
			n.fail(fmt.Errorf("A %s: create: %w", sid, err))
		}
		if err == nil && c.HeadSeq == int64(len(msgs)) && !n.created(sid) {
			n.aSessions.Add(1)
			n.aBytes.Add(textBytes(msgs))
		}
	}
	n.sending = paced(ctx, n.o.Flood, func(rctx context.Context, k int) {
		n.sent.Add(1)
		// Turns first, so that a request let in compacts (a model
		// call), as a runtime's would.
		sid := fmt.Sprintf("a-%02d", k%sessions)
		ap, err := a.Append(rctx, sid, turns(sid, 1000+k*5, 5))
		if q := quotaOf(err); q != "" {
			c, _ := n.refused.LoadOrStore(q, new(atomic.Int64))
			c.(*atomic.Int64).Add(1)
			return
		} else if err != nil {
			n.failed.Add(1)
			n.fail(fmt.Errorf("A %s: append: %w", sid, err))
			return
		}
		n.aBytes.Add(int64(ap.Bytes))
		_, err = a.Compact(rctx, sid, client.CompactRequest{RequestID: uuid.NewString(), Model: "gpt-4o", ContextLimit: noisyLimit})
		// A failed compaction was stored and answered; a request
		// refused at the door is an error of another kind.
		var failed *client.FailedError
		answered := err == nil || errors.As(err, &failed)
		var qe string
		if !answered {
			qe = quotaOf(err)
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
	})
}

// Markdown renders the report.
func (r NoisyReport) Markdown(command string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Noisy neighbour\n\nWritten by `%s` (`make chaos`). Do not edit by hand.\n\n", command)
	verdict := "**Every goal met.**"
	if !r.Pass() {
		verdict = "**Goals missed** (marked below)."
	}
	l := r.Limits
	fmt.Fprintf(&b, "%s A nats-server in its own process with the repo's `nats.conf` (tenants on their own accounts), %d `compactor serve` replicas, a model answering in %s. "+
		"Tenant B: %d runtimes, each appending turns (two exchanges an append) past its %d-token limit and requesting a compaction (request event to result event), "+
		"for %s alone, %s while tenant A sends %d compaction requests per second (each after an append) over %d sessions, and %s while A sends %d appends per second, "+
		"in %d rounds that take turns (so that what the machine does over the run falls on the three alike). "+
		"A's floods come from a process of their own, as another tenant's runtimes do, B's runtimes from the harness's; "+
		"A's runs at the lowest scheduling priority (nice %d): its runtimes would run on their own hosts, and here the flood's own work took a fifth of one of the two cores the service runs on. It still sends at its rate, which the goals check. "+
		"A's quotas, shared by the replicas: %g requests per second (burst %d), %d concurrent compactions, %g writes per second (burst %d), %d concurrent writes, %d sessions, %d MiB stored.\n\n",
		verdict, noisyReplicas, r.ModelDelay, r.Quiet, noisyLimit, r.Phase, r.Phase, r.Flood, floodSessions, r.Phase, r.AppendFlood.PerSecond, r.Rounds, floodNice,
		l.RequestsPerSecond, l.RequestsBurst, l.ConcurrentCompactions, l.WritesPerSecond, l.WritesBurst, l.ConcurrentWrites, l.Sessions, l.BytesStored>>20)
	b.WriteString("| tenant B | compactions | p50 | p99 | max | appends | p50 | p99 | max |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	for _, row := range []struct {
		name string
		c, a Latencies
	}{{"alone", r.Alone, r.AloneAppends}, {"beside A's compaction requests, within A's quotas", r.Beside, r.BesideAppends},
		{"beside A's appends, within A's quotas", r.AppendFlood.Compactions, r.AppendFlood.Appends},
		{"beside A's compaction requests, A's quotas lifted (control)", r.Unprotected, r.UnprotectedAppends}} {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d | %s | %s | %s |\n", row.name, row.c.N, ms(row.c.P50), ms(row.c.P99), ms(row.c.Max), row.a.N, ms(row.a.P50), ms(row.a.P99), ms(row.a.Max))
	}
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	b.WriteString("\n| goal | figure | |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&b, "| B's compaction p99 beside A's compaction requests within %.0f %% of alone | %.2fx | %s |\n", (noisyGoal-1)*100, r.Ratio, mark(r.Ratio <= noisyGoal))
	fmt.Fprintf(&b, "| B's append p99 beside A's compaction requests within %.0f %% of alone | %.2fx | %s |\n", (noisyGoal-1)*100, r.AppendRatio, mark(r.AppendRatio <= noisyGoal))
	fmt.Fprintf(&b, "| B's compaction p99 beside A's appends within %.0f %% of alone | %.2fx | %s |\n", (noisyGoal-1)*100, r.AppendFlood.CompactionRatio, mark(r.AppendFlood.CompactionRatio <= noisyGoal))
	fmt.Fprintf(&b, "| B's append p99 beside A's appends within %.0f %% of alone | %.2fx | %s |\n", (noisyGoal-1)*100, r.AppendFlood.AppendRatio, mark(r.AppendFlood.AppendRatio <= noisyGoal))
	q := r.Quota
	fmt.Fprintf(&b, "| A's sessions at most %.0f %% over its quota (%d) | %d (%+.1f %%) | %s |\n", quotaGoal*100, q.SessionsQuota, q.Sessions, 100*q.SessionsOver, mark(q.SessionsOver <= quotaGoal && q.Refused[tenant.QuotaSessions] > 0))
	fmt.Fprintf(&b, "| A's bytes stored at most %.0f %% over its quota (%d) | %d (%+.1f %%) | %s |\n", quotaGoal*100, q.BytesQuota, q.Bytes, 100*q.BytesOver, mark(q.BytesOver <= quotaGoal && q.Refused[tenant.QuotaBytesStored] > 0))
	fmt.Fprintf(&b, "| A's floods sent at %.0f %% of their rates or more | requests %.0f/s of %d, appends %.0f/s of %d | %s |\n", floodRateGoal*100,
		r.FloodRate, r.Flood, r.AppendFlood.Rate, r.AppendFlood.PerSecond, mark(r.floodsKeptRate()))
	fmt.Fprintf(&b, "| tenant B's failures | %d | %s |\n", r.QuietFailures, mark(r.QuietFailures == 0 && len(r.Errors) == 0))
	fmt.Fprintf(&b, "\nWithout A's quotas B's compaction p99 is %.2fx its p99 alone, %d of its requests without a result within %s (of A's %d requests, %d answered, %d without a result within 30 s).\n\n",
		r.UnprotectedRatio, r.UnprotectedUnanswered, bWait, r.UnprotectedSent, r.UnprotectedStored, r.UnprotectedFailed)
	fmt.Fprintf(&b, "Tenant A's compaction requests within its quotas: %d sent, %d stored and answered; refused by quota: %s; %d failed otherwise. "+
		"Its appends: %d sent, %d stored; refused by quota: %s; %d failed otherwise. Writing sessions and bytes as fast as it could (%g writes per second sent, ten times its quota): refused by quota: %s. (fair_share: the endpoints' workers, shared between tenants.) "+
		"Sessions and bytes are what A was told it stored (creates answered new, the `bytes` of the appends answered applied), against the quotas.\n",
		r.FloodSent, r.FloodStored, refusedText(r.FloodRefused), r.FloodFailed, r.AppendFlood.Sent, r.AppendFlood.Stored, refusedText(r.AppendFlood.Refused), r.AppendFlood.Failed,
		10*l.WritesPerSecond, refusedText(q.Refused))
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "\n- error: %s", e)
	}
	return b.String()
}

func refusedText(m map[string]int64) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%d (%s)", v, k))
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
