package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	cejs "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/consumer"
	"github.com/compactor/compactor/internal/events"
	"github.com/compactor/compactor/internal/natstest"
	"github.com/compactor/compactor/schemas"
)

// The CloudEvents project's own Go binding for NATS JetStream, used as a
// runtime author would: it sends requests in binary mode (with
// ce-datacontenttype) and in structured mode (a JSON event, no headers),
// and it receives the results with a consumer bound by subject
// compaction.>, reading every attribute. Each of these failed before:
// the requests were dead-lettered, the consumer found no stream, and the
// results lost their datacontenttype and trace.
func TestOfficialGoBinding(t *testing.T) {
	srv := natstest.Server(t, t.TempDir(), -1)
	service(t, srv.ClientURL(), nil, nil)
	nc, _ := natstest.Connect(t, srv)
	for _, sid := range []string{"bin", "st"} {
		if code := call(t, nc, contract.SubjectCreate, map[string]any{"session_id": sid, "context_limit": 3000, "messages": chatJSON(40)}, nil); code != "" {
			t.Fatalf("create %s: %s", sid, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The receiver first: a JetStream consumer bound by compaction.>.
	rcv, err := cejs.NewConsumerFromConn(nc, consumer.ResultStream, contract.ResultSubjects, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := cloudevents.NewClient(rcv)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]cloudevents.Event{}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- rc.StartReceiver(rctx, func(ev cloudevents.Event) {
			mu.Lock()
			got[ev.ID()] = ev
			mu.Unlock()
		})
	}()

	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	send := func(sid, id string, structured bool) {
		t.Helper()
		snd, err := cejs.NewSenderFromConn(nc, consumer.RequestStream, contract.OverBudgetPrefix+sid, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := cloudevents.NewClient(snd)
		if err != nil {
			t.Fatal(err)
		}
		ev := cloudevents.NewEvent()
		ev.SetID(id)
		ev.SetSource("urn:runtime:test agent") // a space: percent-encoded in binary mode
		ev.SetType(contract.TypeContextOverBudget)
		ev.SetSubject(sid)
		ev.SetExtension("traceparent", traceparent)
		ev.SetExtension("tracestate", "rojo=00f067aa0ba902b7")
		if err := ev.SetData(cloudevents.ApplicationJSON, contract.RequestData{SessionID: sid, Model: "gpt-4o", ContextLimit: 3000}); err != nil {
			t.Fatal(err)
		}
		sctx := ctx
		if structured {
			sctx = binding.WithForceStructured(ctx)
		}
		if res := c.Send(sctx, ev); cloudevents.IsUndelivered(res) {
			t.Fatalf("send %s: %v", id, res)
		}
	}
	send("bin", "req-binary", false)
	send("st", "req-structured", true)

	want := map[string]string{contract.RequestResultID("req-binary"): "bin", contract.RequestResultID("req-structured"): "st"}
	natstest.Eventually(t, 45*time.Second, 50*time.Millisecond, func() error {
		mu.Lock()
		n := 0
		for id := range want {
			if _, ok := got[id]; ok {
				n++
			}
		}
		mu.Unlock()
		if n < len(want) {
			return fmt.Errorf("results through the official binding: %d of %d (dead letters: %d)", n, len(want), dlqCount(t, nc))
		}
		return nil
	})
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for id, sid := range want {
		ev := got[id]
		if ev.Type() != contract.TypeCompactionCompleted || ev.Subject() != sid || ev.Source() != events.DefaultSource || ev.Time().IsZero() ||
			ev.DataContentType() != "application/json" || ev.SpecVersion() != "1.0" {
			t.Errorf("result %s attributes:\n%s", id, ev)
		}
		if tp, _ := ev.Extensions()["traceparent"].(string); tp != traceparent {
			t.Errorf("result %s traceparent %q, want the request's", id, tp)
		}
		if ts, _ := ev.Extensions()["tracestate"].(string); ts != "rojo=00f067aa0ba902b7" {
			t.Errorf("result %s tracestate %q", id, ts)
		}
		if err := schemas.Validate(schemas.CompactionCompleted, ev.Data()); err != nil {
			t.Errorf("result %s data: %v", id, err)
		}
		var d struct {
			Outcome string `json:"outcome"`
		}
		if err := json.Unmarshal(ev.Data(), &d); err != nil || d.Outcome != "compacted" {
			t.Errorf("result %s outcome %q %v", id, d.Outcome, err)
		}
	}
	if n := dlqCount(t, nc); n != 0 {
		t.Fatalf("%d requests dead-lettered", n)
	}
}

// dlqCount is how many dead letters COMPACTION_DLQ holds.
func dlqCount(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return natstest.StreamMsgs(t, js, consumer.DLQStream)
}
