package preparer

import (
	"context"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/extractive"
	"github.com/compactor/compactor/internal/memstore"
	"github.com/compactor/compactor/internal/pipeline"
	"github.com/compactor/compactor/internal/tenant"
	"github.com/compactor/compactor/internal/tokens"
)

// memService is a pipeline over an in-memory store, for the preparer to
// schedule on.
func memService(t *testing.T) *pipeline.Service {
	t.Helper()
	counter, err := tokens.ForEncoding("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := pipeline.New(memstore.New(), memstore.NewBreakers(), extractive.New(counter), pipeline.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// A read that a runtime's appends overtake (the runtime appends while the
// preparer reads its session, as one appending hundreds of times a second
// does) leaves the estimate at the head it had reached, the appends after
// the read's head on top of the count, and calibrated on those before it:
// the next append goes on from there without a read, and an append the
// read counted already (its call came after the read) is not counted
// twice. The estimate used to restart at the read's head: the next
// append seemed to follow one it had not seen, and read the session
// again, a read every few appends (make scale through the endpoint: 0.05x
// raw KV puts at 8 runtimes).
func TestAReadOvertakenByAppendsKeepsThem(t *testing.T) {
	svc := memService(t)
	clock := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	p := New(svc, Options{Now: func() time.Time { return clock }})
	ctx := context.Background()
	key := tenant.Key(tenant.From(ctx), "s")
	const limit = 100_000
	p.est[key] = &estimate{head: 10, readHead: 10, tokens: 1000, base: 1000, limit: limit, read: clock}
	snap, _ := p.snapshot(key)
	for h := int64(11); h <= 20; h++ { // while the read runs
		p.Appended(ctx, "s", Append{Head: h, FirstSeq: h, Tokens: 100})
	}
	// The read found head 15: 500 tokens more than it began with, where
	// the appends to it said 500.
	p.learn(key, pipeline.Preparation{HeadSeq: 15, Limit: limit, TokensBefore: 1500, Outcome: pipeline.PrepareBelow}, snap)
	e := p.est[key]
	if e.head != 20 || e.readHead != 15 || e.base != 1500 || e.added != 500 || e.scale != 1 || e.tokens != 2000 || len(e.marks) != 5 {
		t.Fatalf("estimate after the read: %+v", *e)
	}
	queued, skipped := p.Stats().Queued, p.Stats().Skipped
	p.Appended(ctx, "s", Append{Head: 21, FirstSeq: 21, Tokens: 100})
	p.Appended(ctx, "s", Append{Head: 14, FirstSeq: 14, Tokens: 100}) // counted by the read
	if st := p.Stats(); st.Queued != queued || st.Skipped != skipped+2 || p.est[key].tokens != 2100 {
		t.Fatalf("after the read: %+v, estimate %+v", st, *p.est[key])
	}
	// An append after one it did not see (another replica's) is read.
	p.Appended(ctx, "s", Append{Head: 30, FirstSeq: 30, Tokens: 100})
	if p.Stats().Queued != queued+1 {
		t.Fatalf("an append after a gap was not read: %+v", p.Stats())
	}

	// A new session: its first append queues a read, and the appends made
	// while it waits and runs go on an estimate without a count, which
	// the read takes up: no second read.
	key2 := tenant.Key(tenant.From(ctx), "new")
	p.Appended(ctx, "new", Append{Head: 2, FirstSeq: 2, Tokens: 100})
	snap, _ = p.snapshot(key2)
	if snap == nil || p.Stats().Queued != queued+2 {
		t.Fatalf("the first append: %+v", p.Stats())
	}
	for h := int64(3); h <= 6; h++ {
		p.Appended(ctx, "new", Append{Head: h, FirstSeq: h, Tokens: 100})
	}
	if p.Stats().Queued != queued+2 {
		t.Fatalf("appends while the first read waits were queued: %+v", p.Stats())
	}
	p.learn(key2, pipeline.Preparation{HeadSeq: 4, Limit: limit, TokensBefore: 700, Outcome: pipeline.PrepareBelow}, snap)
	if e := p.est[key2]; e.head != 6 || e.base != 700 || e.added != 200 || e.tokens != 900 || e.scale != 0 {
		t.Fatalf("a new session's estimate after its read: %+v", *e)
	}
	p.Appended(ctx, "new", Append{Head: 7, FirstSeq: 7, Tokens: 100})
	if p.Stats().Queued != queued+2 {
		t.Fatalf("a new session read again: %+v", p.Stats())
	}

	// A session created through the service starts from the create's
	// count: its appends are not read to start an estimate.
	p.Created(ctx, "made", 3, 400, limit)
	p.Appended(ctx, "made", Append{Head: 4, FirstSeq: 4, Tokens: 100})
	if e := p.est[tenant.Key(tenant.From(ctx), "made")]; p.Stats().Queued != queued+2 || e.tokens != 500 {
		t.Fatalf("a created session's first append: %+v, estimate %+v", p.Stats(), *e)
	}

	// The session deleted and created again through another replica:
	// its appends come at heads the estimate passed. Within Recheck of
	// the read they are taken as counted; after it, read.
	clock = clock.Add(11 * time.Second)
	p.Appended(ctx, "made", Append{Head: 2, FirstSeq: 2, Tokens: 100})
	if p.Stats().Queued != queued+3 {
		t.Fatalf("an append under the estimate's head, its read long past, was not read: %+v", p.Stats())
	}
}

// Two replicas share a session's appends (a queue group takes turns):
// each sees a gap in the seqs before most of its appends. Where the
// session's bytes are known before the gap and after the append, the
// gap is estimated from them (erring high, a message's framing each) and
// nothing is read; the estimate that follows is the one a replica seeing
// every append would have, give or take the framing. Without the bytes,
// or with bytes that went down (the session deleted and made again), the
// session is read, as before. The gap used to be read every time: with
// two replicas, a read of the whole session for one append in two.
func TestAppendsThroughAnotherReplicaAreNotRead(t *testing.T) {
	svc := memService(t)
	clock := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	p := New(svc, Options{Now: func() time.Time { return clock }, Unpaced: true})
	ctx := context.Background()
	key := tenant.Key(tenant.From(ctx), "s")
	const limit = 100_000
	p.learn(key, pipeline.Preparation{HeadSeq: 10, Limit: limit, TokensBefore: 1000, SessionBytes: 4000, Outcome: pipeline.PrepareBelow}, nil)
	queued := p.Stats().Queued
	// Here: appends of two messages of 300 bytes each, every other one;
	// the other replica's between them are as big.
	bytes := int64(4000)
	for head := int64(12); head <= 40; head += 4 {
		if head > 12 {
			bytes += 600 // the other replica's
		}
		bytes += 600
		p.Appended(ctx, "s", Append{Head: head, FirstSeq: head - 1, Tokens: EstimateTokens(600), SessionBytes: bytes})
	}
	e := p.est[key]
	if st := p.Stats(); st.Queued != queued {
		t.Fatalf("appends after another replica's were read: %+v", st)
	}
	// 16 messages here and 14 there, 9,000 bytes: 3,000 tokens by
	// EstimateTokens, and 4 a message at most.
	if e.head != 40 || e.bytes != bytes || e.tokens < 1000+3000 || e.tokens > 1000+3000+4*30 {
		t.Fatalf("the estimate: %+v", *e)
	}
	// Without the session's bytes, a gap is read.
	p.Appended(ctx, "s", Append{Head: 44, FirstSeq: 43, Tokens: EstimateTokens(600)})
	if p.Stats().Queued != queued+1 {
		t.Fatalf("a gap without the session's bytes was not read: %+v", p.Stats())
	}
	// A session whose bytes went down under the estimate's is read too.
	key2 := tenant.Key(tenant.From(ctx), "t")
	p.learn(key2, pipeline.Preparation{HeadSeq: 10, Limit: limit, TokensBefore: 1000, SessionBytes: 4000, Outcome: pipeline.PrepareBelow}, nil)
	p.Appended(ctx, "t", Append{Head: 13, FirstSeq: 12, Tokens: EstimateTokens(600), SessionBytes: 900})
	if p.Stats().Queued != queued+2 {
		t.Fatalf("a gap with fewer bytes than before was not read: %+v", p.Stats())
	}
}
