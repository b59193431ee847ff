package events

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Stored is an event as the result stream keeps it, decoded for reading:
// what the inspector shows of a session's requests.
type Stored struct {
	Seq     uint64
	Time    time.Time
	Subject string
	ID      string
	Type    string
	// TraceID is the trace the event carries (its traceparent's), "" when
	// none.
	TraceID string
	Data    map[string]any
}

// maxReadBatch bounds one batched read.
const maxReadBatch = 500

// Read reads the events of stream on subjects filter (a wildcard is
// allowed) stored since since, oldest first, at most max, with batched
// direct gets (any replica may answer). A stream that holds none answers
// none.
func Read(ctx context.Context, nc *nats.Conn, stream, filter string, since time.Time, max int) ([]Stored, error) {
	var out []Stored
	req := map[string]any{"start_time": since.UTC(), "next_by_subj": filter}
	for len(out) < max {
		req["batch"] = min(maxReadBatch, max-len(out))
		got, more, err := readBatch(ctx, nc, stream, req)
		if err != nil {
			return out, err
		}
		out = append(out, got...)
		if !more || len(got) == 0 {
			return out, nil
		}
		req = map[string]any{"seq": got[len(got)-1].Seq + 1, "next_by_subj": filter}
	}
	return out, nil
}

func readBatch(ctx context.Context, nc *nats.Conn, stream string, req map[string]any) ([]Stored, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(req)
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, b); err != nil {
		return nil, false, err
	}
	var out []Stored
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return out, false, fmt.Errorf("read %s: %w", stream, err)
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "204": // the end of this batch
			pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
			return out, pending > 0, nil
		case "404": // nothing (more)
			return out, false, nil
		default:
			return out, false, fmt.Errorf("read %s: status %s %s", stream, status, m.Header.Get("Description"))
		}
		seq, _ := strconv.ParseUint(m.Header.Get(nats.JSSequence), 10, 64)
		at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(nats.JSTimeStamp))
		ev := Stored{Seq: seq, Time: at, Subject: m.Header.Get(nats.JSSubject), ID: m.Header.Get("ce-id"), Type: m.Header.Get("ce-type")}
		if tp := m.Header.Get("ce-traceparent"); len(tp) == 55 {
			ev.TraceID = tp[3:35]
		}
		if err := json.Unmarshal(m.Data, &ev.Data); err != nil {
			ev.Data = map[string]any{"error": "the event's data does not decode: " + err.Error()}
		}
		out = append(out, ev)
	}
}
