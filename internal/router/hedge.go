package router

import (
	"slices"
	"sync"
	"time"

	"github.com/compactor/compactor/internal/pipeline"
)

// Hedge is when a request's summary call that is slower than its provider
// usually is gets a second call beside it: after Factor times the 95th
// percentile of the provider's (and model's) last calls that answered, at
// least Floor, once MinSamples calls have answered; before that (a replica
// just started, a model not called yet) after Cold, at least Floor. The
// first answer wins and the other call is cancelled, so a hung call costs
// that wait and one more call, not the call timeout (10 % of calls hanging
// held requests for the whole 60 s; p99 81 s). A preparation's calls are
// hedged only while a request waits for the preparation
// (pipeline.Awaited): otherwise no runtime waits for them.
type Hedge struct {
	Factor     float64
	Floor      time.Duration
	MinSamples int
	// Cold is the wait before a hedge while fewer than MinSamples calls
	// have answered (0: a quarter of the call timeout).
	Cold time.Duration
}

// DefaultHedge hedges a request's call after three times the provider's
// p95, at least 2 s, once 20 calls have answered, and after a quarter of
// the call timeout before.
func DefaultHedge() Hedge { return Hedge{Factor: 3, Floor: 2 * time.Second, MinSamples: 20} }

// latencySamples is how many recent answered calls a provider's latency is
// estimated from.
const latencySamples = 64

// latencies are a provider's (and model's) recent answered calls' times.
type latencies struct {
	mu   sync.Mutex
	ring [latencySamples]time.Duration
	n    int // samples held, at most latencySamples
	next int
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.next] = d
	l.next = (l.next + 1) % latencySamples
	l.n = min(l.n+1, latencySamples)
}

// p95 is the 95th percentile of the samples held, false below min.
func (l *latencies) p95(min int) (time.Duration, bool) {
	l.mu.Lock()
	s := slices.Clone(l.ring[:l.n])
	l.mu.Unlock()
	if len(s) < max(min, 1) {
		return 0, false
	}
	slices.Sort(s)
	return s[(len(s)*95+99)/100-1], true
}

// latencyOf is the estimator of a provider's model.
func (r *Router) latencyOf(provider, model string) *latencies {
	key := provider + "\x00" + model
	if l, ok := r.latency.Load(key); ok {
		return l.(*latencies)
	}
	l, _ := r.latency.LoadOrStore(key, &latencies{})
	return l.(*latencies)
}

// HedgeAfter implements pipeline.Hedger: how long a request's call of
// req's model (and provider) may run before it is hedged (false: it is
// not).
func (r *Router) HedgeAfter(req pipeline.SummaryRequest) (time.Duration, bool) {
	return r.hedgeAfter(r.pick(req).Name(), req.Model)
}

// hedgeAfter is how long a request's call may run before it is hedged
// (false: it is not).
func (r *Router) hedgeAfter(provider, model string) (time.Duration, bool) {
	if r.hedge.Factor <= 0 {
		return 0, false
	}
	p95, ok := r.latencyOf(provider, model).p95(r.hedge.MinSamples)
	after := time.Duration(r.hedge.Factor * float64(p95))
	if !ok {
		// Too few answers to say what is slow: a hung call on a replica
		// just started is not waited out either.
		if after = r.hedge.Cold; after <= 0 {
			after = r.timeout / 4
		}
	}
	after = max(after, r.hedge.Floor)
	return after, after < r.timeout
}
