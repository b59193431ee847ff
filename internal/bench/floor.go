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
)

// The floor: a minimal program doing only the JetStream work one
// compaction needs, on its own streams so it never meets the service:
// pull the request, read the session's record and messages (one batched
// direct get of every key of the session, the cheapest read there is),
// write a compaction message (create) and the record (compare-and-set),
// publish the result with a Nats-Msg-Id, double-ack.
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
func runFloor(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, workers int) error {
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
			if err := floorOne(ctx, nc, js, msg); err != nil {
				_ = msg.Nak()
			}
		}()
	}
}

func floorOne(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, msg jetstream.Msg) error {
	sid := msg.Subject()[len(floorReqPrefix):]
	// Read: every key of the session in one streamed direct get.
	vals, err := readAll(ctx, nc, "$KV.sessions."+sid+".>")
	if err != nil {
		return err
	}
	rec, ok := vals["$KV.sessions."+sid+".rec"]
	if !ok {
		return fmt.Errorf("floor: no record for %s", sid)
	}
	// Write: the compaction message (create), then the record (CAS).
	comp, _ := json.Marshal(map[string]any{"id": uuid.NewString(), "role": "user", "content": "summary", "is_compaction": true})
	m1 := nats.NewMsg("$KV.sessions." + sid + ".c." + uuid.NewString())
	m1.Data = comp
	m1.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := js.PublishMsg(ctx, m1); err != nil {
		return err
	}
	m2 := nats.NewMsg("$KV.sessions." + sid + ".rec")
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

// readAll reads the last value of every subject matching filter with one
// batched direct get on KV_sessions.
func readAll(ctx context.Context, nc *nats.Conn, filter string) (map[string]storedValue, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	req, _ := json.Marshal(map[string]any{"next_by_subj": filter, "batch": 1 << 20})
	if err := nc.PublishRequest("$JS.API.DIRECT.GET.KV_sessions", inbox, req); err != nil {
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
