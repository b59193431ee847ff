package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/contract"
	"github.com/compactor/compactor/internal/tenant"
)

// StoredResult is a request's result event as the result stream keeps it.
type StoredResult struct {
	// Failed says it is a CompactionFailed (else CompactionCompleted).
	Failed bool
	// Data is the event's data: what the request was answered.
	Data json.RawMessage
}

// maxAnsweredScan bounds the events Answered reads for one request.
const maxAnsweredScan = 10_000

// Answered reads the result event stored for request requestID of
// session sid (ctx's tenant): the first of either kind among the
// session's events stored since since, read from the result stream's
// leader (so it sees every publish acknowledged before). nil when there
// is none. A request has one result: one delivered again, or repeated,
// after it was answered is answered with it, whichever kind it is, and
// does no work again (a failure answered, its acknowledgement lost in a
// leader change, then a redelivery that compacted the grown session, left
// two contradicting results).
func (p *Publisher) Answered(ctx context.Context, sid, requestID string, since time.Time) (*StoredResult, error) {
	if p.Stream == "" {
		return nil, nil
	}
	t := tenant.From(ctx)
	completed, failed := tenant.MsgID(t, contract.RequestResultID(requestID)), tenant.MsgID(t, contract.FailedResultID(requestID))
	filter := tenant.Subject(t, "compaction.*."+sid)
	req := map[string]any{"start_time": since.UTC(), "next_by_subj": filter}
	for range maxAnsweredScan {
		m, err := p.leaderGet(ctx, req)
		if errors.Is(err, errNoMessage) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read the results of session %s: %w", sid, err)
		}
		switch m.Header.Get(jetstream.MsgIDHeader) {
		case completed:
			return &StoredResult{Data: m.Data}, nil
		case failed:
			return &StoredResult{Failed: true, Data: m.Data}, nil
		}
		req = map[string]any{"seq": m.Seq + 1, "next_by_subj": filter}
	}
	return nil, fmt.Errorf("read the results of session %s: more than %d events since %v", sid, maxAnsweredScan, since)
}

var errNoMessage = errors.New("no message")

// storedMsg is one message of $JS.API.STREAM.MSG.GET's answer.
type storedMsg struct {
	Seq    uint64 `json:"seq"`
	Header nats.Header
	Data   []byte `json:"data"`
}

// leaderGet is one $JS.API.STREAM.MSG.GET on the result stream (which
// only its leader answers).
func (p *Publisher) leaderGet(ctx context.Context, req map[string]any) (*storedMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	b, _ := json.Marshal(req)
	reply, err := p.JS.Conn().RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+p.Stream, b)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Seq    uint64 `json:"seq"`
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("%w: %q", jetstream.ErrInvalidJetStreamResponse, reply.Data)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, errNoMessage
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, jetstream.ErrInvalidJetStreamResponse
	}
	m := &storedMsg{Seq: resp.Message.Seq, Data: resp.Message.Data, Header: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("result headers: %w", err)
		}
	}
	return m, nil
}
