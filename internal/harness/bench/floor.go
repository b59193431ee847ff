package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/kvstore"
)

// The floor: a minimal program doing only the JetStream work one
// compaction needs, on its own streams so it never meets the service:
// pull the request, read the session's record and its data (one batched
// direct get each, the cheapest reads there are), write a compaction
// message and the record (compare-and-set), publish the result with a
// Nats-Msg-Id, double-ack.
const (
	floorStream    = "BENCH_FLOOR_REQ"
	floorResults   = "BENCH_FLOOR_RES"
	floorReqPrefix = "bench.floor.req."
	floorResPrefix = "bench.floor.res."
	floorDurable   = "floor"
)

func provisionFloor(ctx context.Context, js jetstream.JetStream) error {
	for _, cfg := range []jetstream.StreamConfig{
		{Name: floorStream, Subjects: []string{floorReqPrefix + ">"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 30 * time.Minute},
		{Name: floorResults, Subjects: []string{floorResPrefix + ">"}, Storage: jetstream.FileStorage, Duplicates: 30 * time.Minute},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return err
		}
	}
	_, err := js.CreateOrUpdateConsumer(ctx, floorStream, jetstream.ConsumerConfig{Durable: floorDurable,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxDeliver: 5, MaxAckPending: 1000})
	return err
}

// runFloor serves floor requests with workers goroutines until ctx ends.
func runFloor(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, workers, shards int) error {
	cons, err := js.Consumer(ctx, floorStream, floorDurable)
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(workers))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, workers)
	go func() { <-ctx.Done(); it.Stop() }()
	for {
		msg, err := it.Next()
		if err != nil {
			wg.Wait()
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
				return nil
			}
			return err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := floorOne(ctx, nc, js, msg, shards); err != nil {
				_ = msg.Nak()
			}
		}()
	}
}

func floorOne(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, msg jetstream.Msg, shards int) error {
	sid := msg.Subject()[len(floorReqPrefix):]
	n := kvstore.ShardOf(kvstore.DefaultTenant, sid, shards)
	bucket := kvstore.RecordsBucket(n)
	recSubj := "$KV." + bucket + "." + kvstore.DefaultTenant + "." + sid
	data := fmt.Sprintf("%s%d.%s.%s.", kvstore.DataSubjectPrefix, n, kvstore.DefaultTenant, sid)
	// Read: the record, then every value of the session's data, in one
	// streamed direct get each.
	recs, err := readAll(ctx, nc, "KV_"+bucket, recSubj)
	if err != nil {
		return err
	}
	rec, ok := recs[recSubj]
	if !ok {
		return fmt.Errorf("floor: no record for %s", sid)
	}
	if _, err := readAll(ctx, nc, kvstore.DataStream(n), data+">"); err != nil {
		return err
	}
	// Write: the compaction message, then the record (CAS).
	comp, _ := json.Marshal(map[string]any{"id": uuid.NewString(), "role": "user", "content": "summary", "is_compaction": true})
	m1 := nats.NewMsg(data + "c")
	m1.Data = comp
	if _, err := js.PublishMsg(ctx, m1); err != nil {
		return err
	}
	m2 := nats.NewMsg(recSubj)
	m2.Data = rec.data
	m2.Header.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(rec.seq))
	if _, err := js.PublishMsg(ctx, m2); err != nil {
		return err
	}
	// Publish the result, then ack.
	res := nats.NewMsg(floorResPrefix + sid)
	res.Header.Set(jetstream.MsgIDHeader, "floor-"+msg.Headers().Get(jetstream.MsgIDHeader))
	res.Header.Set("ce-id", msg.Headers().Get("ce-id"))
	res.Data = []byte(`{"outcome":"compacted"}`)
	if _, err := js.PublishMsg(ctx, res); err != nil {
		return err
	}
	return msg.DoubleAck(ctx)
}

type storedValue struct {
	seq  uint64
	data []byte
}

// readAll reads the messages matching filter with one batched direct get
// on stream, and returns the last of each subject.
func readAll(ctx context.Context, nc *nats.Conn, stream, filter string) (map[string]storedValue, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(map[string]any{"next_by_subj": filter, "batch": 1 << 20})
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	out := map[string]storedValue{}
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, err
		}
		switch m.Header.Get("Status") {
		case "":
		case "204", "404":
			return out, nil
		default:
			return nil, fmt.Errorf("direct get: %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
		}
		var seq uint64
		fmt.Sscan(m.Header.Get(nats.JSSequence), &seq)
		out[m.Header.Get(nats.JSSubject)] = storedValue{seq: seq, data: m.Data}
	}
}
