package preparer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/preparer"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/tokens"
)

// testClock is a clock that moves only when advanced.
func testClock() (now func() time.Time, advance func(time.Duration)) {
	var (
		mu    sync.Mutex
		clock = time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	)
	return func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
		func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }
}

// told tells p of an append a (of n messages, tokens as told) and waits
// for every job it queued: their outcomes, in the order they ran (a read
// may queue a preparation before it is observed).
func told(t *testing.T, ctx context.Context, p *preparer.Preparer, done <-chan pipeline.Preparation, sid string, a session.Appended, n, tokens int) []pipeline.Preparation {
	t.Helper()
	queued := p.Stats().Queued
	p.Appended(ctx, sid, preparer.Append{Head: a.HeadSeq, FirstSeq: a.HeadSeq - int64(n) + 1, Tokens: tokens})
	var outs []pipeline.Preparation
	for ; p.Stats().Queued > queued; queued++ {
		select {
		case out := <-done:
			outs = append(outs, out)
		case <-time.After(10 * time.Second):
			t.Fatal("no preparation ran")
		}
	}
	return outs
}

// prepared is the preparation among outs, if one was made.
func prepared(outs []pipeline.Preparation) (pipeline.Preparation, bool) {
	for _, out := range outs {
		if out.Outcome == pipeline.PrepareDone {
			return out, true
		}
	}
	return pipeline.Preparation{}, false
}

// chatTurn is turn i of a chat between people: English prose, which
// counts at about 0.7 of its bytes' estimate.
func chatTurn(i int) []session.Message {
	return []session.Message{
		{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Hey, it has been a while! Last weekend (the %dth) I finally went hiking up the ridge behind the old mill with my sister, and we took the long trail past the lake because the short one was closed after the storm.", i%28+1))},
		{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("That sounds lovely. Was the lake still frozen at the edges? Last time you told me about trip number %d you said the water was so clear you could see the stones at the bottom, and that your sister wanted to come back in the summer.", i))},
	}
}

// slowPreparer runs a preparer of one worker on the test clock whose
// every preparation takes ready; each outcome goes to observe.
func slowPreparer(ctx context.Context, svc *pipeline.Service, now func() time.Time, advance func(time.Duration), ready time.Duration, observe func(pipeline.Preparation)) *preparer.Preparer {
	p := preparer.New(svc, preparer.Options{Workers: 1, Now: now,
		Busy:    func() bool { advance(ready); return false },
		Observe: func(out pipeline.Preparation, _ error) { observe(out) }})
	go func() { _ = p.Run(ctx) }()
	return p
}

// createChat creates the gpt-4o session sid with limit and no messages.
func createChat(t *testing.T, ctx context.Context, store *memstore.Store, sid string, limit int) {
	t.Helper()
	if _, err := store.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o", ContextLimit: limit}, nil); err != nil {
		t.Fatal(err)
	}
}

// newService is a pipeline on a memory store, with the extractive
// summariser and no message-count trigger.
func newService(t *testing.T) (*tokens.Counter, *memstore.Store, *pipeline.Service) {
	t.Helper()
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	cfg := pipeline.DefaultConfig()
	cfg.MaxMessages = 0
	svc, err := pipeline.New(store, memstore.NewBreakers(), extractive.New(counter), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return counter, store, svc
}

// The scheduler reads a session once, then keeps count from the appends
// it is told of: appends under prepare_at cost no read, an append after
// one it missed (another replica's) is read again, and the session is
// prepared once it passes the threshold.
func TestAppendsAreCheckedAgainstAnEstimate(t *testing.T) {
	counter, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs []pipeline.Preparation
	done := make(chan pipeline.Preparation, 100)
	p := preparer.New(svc, preparer.Options{Workers: 1, Observe: func(out pipeline.Preparation, _ error) { done <- out }})
	go func() { _ = p.Run(ctx) }()
	wait := func() pipeline.Preparation {
		t.Helper()
		select {
		case out := <-done:
			runs = append(runs, out)
			return out
		case <-time.After(10 * time.Second):
			t.Fatal("no preparation ran")
		}
		return pipeline.Preparation{}
	}
	const limit = 6000
	if _, err := store.Create(ctx, session.Record{SessionID: "s", Model: "gpt-4o", ContextLimit: limit}, nil); err != nil {
		t.Fatal(err)
	}
	head := int64(0)
	appendTurn := func(i int) (first int64, n int) {
		msgs := []session.Message{
			{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d: where is bag BAG-%04d, with my laptop in it?", i, i))},
			{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("bag BAG-%04d is in Lisbon and reaches you on day %d by courier", i, i%28+1))},
		}
		for j := range msgs {
			n += counter.Ensure(&msgs[j])
		}
		a, err := store.AppendWith(ctx, "s", msgs, session.AppendOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first, head = head+1, a.HeadSeq
		return first, n
	}
	// The first append is read: the estimate starts.
	first, n := appendTurn(0)
	p.Appended(ctx, "s", preparer.Append{Head: head, FirstSeq: first, Tokens: n})
	if out := wait(); out.Outcome != pipeline.PrepareBelow || out.HeadSeq != head {
		t.Fatalf("first read: %+v", out)
	}
	// Appends under the threshold are counted, not read.
	i := 1
	for ; ; i++ {
		first, n := appendTurn(i)
		before := p.Stats().Skipped
		p.Appended(ctx, "s", preparer.Append{Head: head, FirstSeq: first, Tokens: n})
		if p.Stats().Skipped == before {
			break // the estimate reached prepare_at: queued
		}
	}
	out := wait()
	if out.Outcome != pipeline.PrepareDone || float64(out.TokensBefore) < svc.Config().PrepareAt*limit {
		t.Fatalf("at the threshold: %+v (after %d turns)", out, i)
	}
	// Once prepared, more appends leave it alone (it stands).
	first, n = appendTurn(i + 1)
	before := p.Stats().Skipped
	p.Appended(ctx, "s", preparer.Append{Head: head, FirstSeq: first, Tokens: n})
	if p.Stats().Skipped != before+1 {
		t.Fatalf("an append after the preparation was queued: %+v", p.Stats())
	}
	// An append it was not told of (another replica's) makes the next one
	// read the session again: with a preparation's time known, a read
	// only (the pace decides from the next append).
	appendTurn(i + 2)
	first, n = appendTurn(i + 3)
	p.Appended(ctx, "s", preparer.Append{Head: head, FirstSeq: first, Tokens: n})
	if out := wait(); out.Outcome != pipeline.PrepareBelow || out.Detail != "measured" || out.Cause != preparer.CauseMeasure || out.HeadSeq != head {
		t.Fatalf("after a missed append: %+v", out)
	}
	if st := p.Stats(); st.Queued != 3 || st.Dropped != 0 {
		t.Fatalf("stats %+v (runs %+v)", st, runs)
	}
}

// A trigger that comes while its session is being prepared runs after
// that preparation, never beside it (beside it, it was answered "in
// flight" and lost: the running one may have read the session before the
// trigger's append, and no later append came to try again).
func TestATriggerDuringAPreparationRunsAfterIt(t *testing.T) {
	_, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var msgs []session.Message
	for i := range 40 {
		msgs = append(msgs,
			session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d: where is bag BAG-%04d, with my laptop in it?", i, i))},
			session.Message{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("bag BAG-%04d is in Lisbon and reaches you on day %d by courier", i, i%28+1))})
	}
	if _, err := store.Create(ctx, session.Record{SessionID: "s", Model: "gpt-4o", ContextLimit: 3000}, msgs); err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	var held atomic.Int32
	done := make(chan pipeline.Preparation, 10)
	p := preparer.New(svc, preparer.Options{Workers: 2,
		// Every worker that took a job waits here until released.
		Busy: func() bool {
			select {
			case <-hold:
				return false
			default:
				held.Add(1)
				return true
			}
		},
		Observe: func(out pipeline.Preparation, _ error) { done <- out }})
	go func() { _ = p.Run(ctx) }()
	req := pipeline.Request{SessionID: "s", Model: "gpt-4o", ContextLimit: 3000}
	p.NearBudget(ctx, req)
	natstest.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error { // the first is taken
		if held.Load() == 0 {
			return errors.New("no worker took the first trigger")
		}
		return nil
	})
	p.NearBudget(ctx, req)             // comes while it runs
	time.Sleep(100 * time.Millisecond) // a second worker would take it now
	close(hold)
	for range 2 {
		select {
		case out := <-done:
			if out.Outcome == pipeline.PrepareInFlight {
				t.Fatalf("the second trigger ran beside the first: %+v", out)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a trigger was lost")
		}
	}
}

// Past prepare_at a session is prepared when its pace says so: one that
// grows slowly, with its limit minutes away and a preparation taking
// seconds, is prepared near its limit (so that the compaction committed
// there leaves as little raw as one made there); one that grows fast is
// prepared at prepare_at; so is every session before the preparer has
// seen a preparation's time, and with Unpaced.
func TestPreparationsArePaced(t *testing.T) {
	counter, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, advance := testClock()
	const limit = 6000
	done := make(chan pipeline.Preparation, 100)
	start := func(opt preparer.Options) *preparer.Preparer {
		// Every preparation takes 3 s on the test's clock.
		opt.Workers, opt.Now = 1, now
		opt.Busy = func() bool { advance(3 * time.Second); return false }
		opt.Observe = func(out pipeline.Preparation, _ error) { done <- out }
		p := preparer.New(svc, opt)
		go func() { _ = p.Run(ctx) }()
		return p
	}
	// grow appends turns to a new session, each every `every` on the
	// clock, until a preparation is made; it returns it, and the tokens
	// appended up to the append that queued it.
	grow := func(p *preparer.Preparer, sid string, every time.Duration) (pipeline.Preparation, int) {
		t.Helper()
		createChat(t, ctx, store, sid, limit)
		total := 0
		for i := 0; ; i++ {
			msgs := []session.Message{
				{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("question %d: where is bag BAG-%04d, with my laptop in it?", i, i))},
				{Role: session.RoleAssistant, Content: session.TextContent(fmt.Sprintf("bag BAG-%04d is in Lisbon and reaches you on day %d by courier", i, i%28+1))},
			}
			n := 0
			for j := range msgs {
				n += counter.Ensure(&msgs[j])
			}
			a, err := store.AppendWith(ctx, sid, msgs, session.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			advance(every)
			total += n
			if out, ok := prepared(told(t, ctx, p, done, sid, a, len(msgs), n)); ok {
				return out, total
			}
			if total > limit {
				t.Fatalf("%s: no preparation before the limit", sid)
			}
		}
	}
	at := int(svc.Config().PrepareAt * limit)

	p := start(preparer.Options{})
	// Before any preparation was seen, prepare_at decides.
	first, _ := grow(p, "first", 10*time.Second)
	if first.TokensBefore > at+100 || p.Stats().Paced != 0 {
		t.Fatalf("the first preparation waited: %+v, %+v", first, p.Stats())
	}
	if st := p.Stats(); st.ReadyMS != 3000 {
		t.Fatalf("ready in %d ms, want 3000", st.ReadyMS)
	}
	// Slow: a turn every 10 s, the limit minutes away at prepare_at.
	slow, _ := grow(p, "slow", 10*time.Second)
	if slow.TokensBefore < at+(limit-at)*3/4 || slow.TokensBefore > limit || p.Stats().Paced == 0 {
		t.Fatalf("a slow session was prepared at %d tokens (prepare_at %d, limit %d), %+v", slow.TokensBefore, at, limit, p.Stats())
	}
	// Fast: a turn every 50 ms, the limit seconds away.
	paced := p.Stats().Paced
	fast, _ := grow(p, "fast", 50*time.Millisecond)
	if fast.TokensBefore > at+100 || p.Stats().Paced != paced {
		t.Fatalf("a fast session was prepared at %d tokens (prepare_at %d), %+v", fast.TokensBefore, at, p.Stats())
	}

	// Unpaced: at prepare_at, however slow.
	u := start(preparer.Options{Unpaced: true})
	grow(u, "warm-unpaced", 10*time.Second)
	slowU, _ := grow(u, "slow-unpaced", 10*time.Second)
	if slowU.TokensBefore > at+100 || u.Stats().Paced != 0 {
		t.Fatalf("unpaced: prepared at %d tokens, %+v", slowU.TokensBefore, u.Stats())
	}
}

// The appends are told as the service tells them, by their bytes
// (EstimateTokens, which errs high on English by about a third): a read
// of the session measures what its appends really came to, and the
// estimate counts with that, so that a slow session is still prepared
// near its limit in real tokens (uncalibrated, it was prepared with a
// ninth of its limit still free: the raw tail its compaction left was
// that much larger). So too after sessions of another kind set the
// preparer's scale (0.85 here, as code runs): a session never measured
// is read, not prepared, when its
// estimate passes prepare_at (counted with the others' scale, a chat
// was prepared at 80 % of its window, 30 s before its request).
func TestEstimatesAreCalibrated(t *testing.T) {
	for _, c := range []struct {
		name  string
		exact bool // the first session's appends told at 0.85 of their bytes' estimate
	}{{"after a chat", false}, {"after another kind of session", true}} {
		t.Run(c.name, func(t *testing.T) { testCalibrated(t, c.exact) })
	}
}

func testCalibrated(t *testing.T, exact bool) {
	counter, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, advance := testClock()
	done := make(chan pipeline.Preparation, 100)
	p := slowPreparer(ctx, svc, now, advance, 3*time.Second, func(out pipeline.Preparation) { done <- out })
	const limit = 8000
	turnTokens := 0
	// grow appends a turn every 10 s until a preparation is made.
	grow := func(sid string, exact bool) pipeline.Preparation {
		t.Helper()
		createChat(t, ctx, store, sid, limit)
		for i := 0; ; i++ {
			msgs := chatTurn(i)
			estimated := 0
			turnTokens = 0
			for j := range msgs {
				turnTokens += counter.Ensure(&msgs[j])
				estimated += preparer.EstimateTokens(len(msgs[j].Text()))
			}
			if exact {
				estimated = int(float64(turnTokens) / 0.85) // (as code runs)
			}
			a, err := store.AppendWith(ctx, sid, msgs, session.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			advance(10 * time.Second)
			outs := told(t, ctx, p, done, sid, a, len(msgs), estimated)
			if out, ok := prepared(outs); ok {
				return out
			}
			for _, out := range outs {
				if out.TokensBefore > limit {
					t.Fatalf("%s: no preparation before the limit (%+v)", sid, out)
				}
			}
		}
	}
	grow("first", exact) // (a preparation's time learnt)
	slow := grow("slow", false)
	st := p.Stats()
	if !exact && (st.Scale < 0.5 || st.Scale > 0.95) {
		t.Fatalf("scale %.2f: English was not measured under the estimate", st.Scale)
	}
	// A turn every 10 s and a preparation in 3 s: due within two turns of
	// the limit (two of its biggest appends), not earlier.
	if slow.TokensBefore < limit-3*turnTokens || slow.TokensBefore > limit || st.Paced == 0 {
		t.Fatalf("prepared at %d tokens of %d (turns of %d tokens), %+v", slow.TokensBefore, limit, turnTokens, st)
	}
}

// An estimate errs by a share of what it added since the session was
// read: here, past 75 % of its limit, the session's turns say 10 % fewer
// tokens than they come to (a chat that turns to numbers and names, the
// scale measured on its prose). Paced on the estimate, it was prepared
// with less than a turn left before its limit, or not before it: the
// next append took it over, and its request waited for the preparation
// or had none. Where the error could make it due, the preparer reads it,
// and prepares on the count.
func TestAnEstimateThatErrsIsReadNearTheLimit(t *testing.T) {
	counter, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, advance := testClock()
	var (
		mu   sync.Mutex
		runs []pipeline.Preparation
	)
	done := make(chan pipeline.Preparation, 100)
	p := slowPreparer(ctx, svc, now, advance, 3*time.Second, func(out pipeline.Preparation) {
		mu.Lock()
		runs = append(runs, out)
		mu.Unlock()
		done <- out
	})
	const limit = 8000
	turnTokens := 0
	// grow appends a turn every 10 s until a preparation is made, its
	// turns told at under of their bytes' estimate once its tokens pass
	// 75 % of the limit.
	grow := func(sid string, under float64) pipeline.Preparation {
		t.Helper()
		createChat(t, ctx, store, sid, limit)
		total := 0
		for i := 0; ; i++ {
			msgs := chatTurn(i)
			estimated := 0
			turnTokens = 0
			for j := range msgs {
				turnTokens += counter.Ensure(&msgs[j])
				estimated += preparer.EstimateTokens(len(msgs[j].Text()))
			}
			if total > limit*3/4 {
				estimated = int(float64(estimated) * (1 - under))
			}
			total += turnTokens
			a, err := store.AppendWith(ctx, sid, msgs, session.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			advance(10 * time.Second)
			if out, ok := prepared(told(t, ctx, p, done, sid, a, len(msgs), estimated)); ok {
				return out
			}
			if total > limit {
				t.Fatalf("%s: no preparation before the limit (%d tokens)", sid, total)
			}
		}
	}
	grow("first", 0) // (a preparation's time, the scale learnt)
	grow("second", 0)
	mu.Lock()
	runs = nil
	mu.Unlock()
	out := grow("errs", 0.1)
	if out.TokensBefore > limit-turnTokens {
		for _, r := range runs {
			t.Logf("%s %s %d %s", r.Cause, r.Outcome, r.TokensBefore, r.CauseDetail)
		}
		t.Fatalf("prepared at %d tokens of %d, less than a turn (%d tokens) left", out.TokensBefore, limit, turnTokens)
	}
	mu.Lock()
	defer mu.Unlock()
	near := 0
	for _, r := range runs {
		if r.Cause == preparer.CauseNear {
			near++
		}
	}
	if near != 1 {
		t.Fatalf("%d reads near the limit, want 1: %+v", near, runs)
	}
}

// With every worker busy, the session nearest its limit is prepared
// first, not the one queued first: a session that has just passed
// prepare_at at a slow pace waits behind one a second from its limit.
func TestTheSessionDueFirstIsPreparedFirst(t *testing.T) {
	_, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, advance := testClock()
	order := make(chan string, 10)
	p := preparer.New(svc, preparer.Options{Workers: 1, Now: now, Unpaced: true,
		Observe: func(out pipeline.Preparation, _ error) { order <- out.SessionID }})
	const limit = 8000
	for _, sid := range []string{"far", "near"} {
		msgs := make([]session.Message, 10)
		for i := range msgs {
			msgs[i] = session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("message %d", i))}
		}
		if _, err := store.Create(ctx, session.Record{SessionID: sid, Model: "gpt-4o", ContextLimit: limit}, msgs); err != nil {
			t.Fatal(err)
		}
		p.Created(ctx, sid, 10, 5000, limit)
	}
	advance(10 * time.Second)
	// Both past prepare_at: far at 80 tokens a second, its limit 27 s
	// off; near at 260, 1.5 s off. far is queued first.
	p.Appended(ctx, "far", preparer.Append{Head: 11, FirstSeq: 11, Tokens: 800})
	p.Appended(ctx, "near", preparer.Append{Head: 11, FirstSeq: 11, Tokens: 2600})
	if st := p.Stats(); st.Queued != 2 {
		t.Fatalf("queued %d, want 2: %+v", st.Queued, st)
	}
	go func() { _ = p.Run(ctx) }()
	var got []string
	for range 2 {
		select {
		case sid := <-order:
			got = append(got, sid)
		case <-time.After(10 * time.Second):
			t.Fatal("no preparation ran")
		}
	}
	if got[0] != "near" || got[1] != "far" {
		t.Fatalf("prepared in the order %v, want near first", got)
	}
}

// A session idle for a minute between bursts of a dozen messages in a
// second (an agent's subtask, a person pasting) grows slowly on average,
// so its pace waited until two appends were left, and the rest of a
// burst took it over its limit a second after its preparation began: its
// request waited for it. The most it appended within a preparation's time
// is kept, and a session with less room than that left is prepared: the
// preparation is ready before the burst can fill what is left.
func TestABurstySessionIsReadyBeforeItsLimit(t *testing.T) {
	counter, store, svc := newService(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now, advance := testClock()
	const ready = 3 * time.Second
	done := make(chan pipeline.Preparation, 100)
	p := slowPreparer(ctx, svc, now, advance, ready, func(out pipeline.Preparation) { done <- out })
	const limit = 8000
	type step struct {
		msg   session.Message
		after time.Duration // the wait before the next message
	}
	// steps is a session's messages: one every 5 s, or bursts of 12 a
	// tenth of a second apart, a minute apart, the first of them cut
	// short by offset.
	steps := func(bursty bool, offset int) []step {
		out := make([]step, 400)
		for i := range out {
			out[i].msg = session.Message{Role: session.RoleUser, Content: session.TextContent(fmt.Sprintf("Step %d of the migration: table orders_%d copied, 2,%03d rows, checksums match, indexes rebuilt on the replica.", i, i, i%1000))}
			counter.Ensure(&out[i].msg)
			switch {
			case !bursty:
				out[i].after = 5 * time.Second
			case (i+offset)%12 == 11:
				out[i].after = time.Minute
			default:
				out[i].after = 100 * time.Millisecond
			}
		}
		return out
	}
	// grow appends the steps until a preparation is made, and returns it
	// and the step whose append queued it.
	grow := func(sid string, steps []step) (pipeline.Preparation, int) {
		t.Helper()
		createChat(t, ctx, store, sid, limit)
		for i, st := range steps {
			a, err := store.AppendWith(ctx, sid, []session.Message{st.msg}, session.AppendOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if out, ok := prepared(told(t, ctx, p, done, sid, a, 1, st.msg.Tokens)); ok {
				return out, i
			}
			advance(st.after)
		}
		t.Fatalf("%s: no preparation", sid)
		return pipeline.Preparation{}, 0
	}
	grow("first", steps(false, 0)) // (a preparation's time learnt)
	// Wherever the limit falls in a burst:
	for offset := range 12 {
		bursty := steps(true, offset)
		out, at := grow(fmt.Sprintf("bursty-%d", offset), bursty)
		// What the session holds once the preparation is ready: its
		// tokens then, and every message appended within its time.
		held, since := out.TokensBefore, bursty[at].after
		for _, st := range bursty[at+1:] {
			if since > ready {
				break
			}
			held, since = held+st.msg.Tokens, since+st.after
		}
		if held > limit {
			t.Errorf("offset %d: prepared at %d tokens of %d (cause %s): %d when it was ready, over the limit", offset, out.TokensBefore, limit, out.Cause, held)
		}
	}
}
