package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

// raw is one stored stream message.
type raw struct {
	seq     uint64
	subject string
	hdr     nats.Header
	data    []byte
	// time is when the stream stored it.
	time time.Time
}

func (r raw) epoch() string { return r.hdr.Get(hdrEpoch) }

// batchMux routes the answers of batched direct gets, which come as many
// messages to one inbox, through one subscription of the connection
// instead of a subscription per read.
type batchMux struct {
	nc     *nats.Conn
	prefix string
	mu     sync.Mutex
	next   uint64
	open   map[string]chan *nats.Msg
}

func newBatchMux(nc *nats.Conn) (*batchMux, error) {
	m := &batchMux{nc: nc, prefix: nc.NewInbox(), open: map[string]chan *nats.Msg{}}
	sub, err := nc.Subscribe(m.prefix+".*", m.dispatch)
	if err != nil {
		return nil, fmt.Errorf("subscribe for batched reads: %w", err)
	}
	// A batch is bounded (batchSize messages, maxBatchBytes); the
	// dispatcher never blocks, so the defaults' limits are never met in
	// practice, but a burst of many readers must not be dropped.
	_ = sub.SetPendingLimits(-1, -1)
	return m, nil
}

func (m *batchMux) dispatch(msg *nats.Msg) {
	m.mu.Lock()
	ch := m.open[msg.Subject]
	m.mu.Unlock()
	if ch == nil {
		return // an abandoned read's
	}
	select {
	case ch <- msg:
	default: // more than a batch: the reader asks again for what is missing
	}
}

// request sends req to subj with a reply inbox of its own and returns the
// channel its answers arrive on, and the function that closes it.
func (m *batchMux) request(subj string, req []byte, room int) (<-chan *nats.Msg, func(), error) {
	m.mu.Lock()
	m.next++
	inbox := m.prefix + "." + strconv.FormatUint(m.next, 36)
	ch := make(chan *nats.Msg, room)
	m.open[inbox] = ch
	m.mu.Unlock()
	done := func() {
		m.mu.Lock()
		delete(m.open, inbox)
		m.mu.Unlock()
	}
	if err := m.nc.PublishRequest(subj, inbox, req); err != nil {
		done()
		return nil, nil, err
	}
	return ch, done, nil
}

// batchSize and maxBatchBytes bound one batched direct get.
const (
	batchSize     = 256
	maxBatchBytes = 8 << 20
)

// directRange reads the messages on subj of stream from stream sequence
// from to to (inclusive; 0: to the end), in order, with batched direct
// gets, which any replica may answer: a lagging one ends early. fn gets
// each; it stops the read by returning false. directRange returns the
// sequence of the last message it passed to fn (0: none).
func (s *Sessions) directRange(ctx context.Context, stream, subj string, from, to uint64, fn func(raw) (bool, error)) (uint64, error) {
	if s.beforeRead != nil {
		s.beforeRead(false, subj)
	}
	return s.mux.directRange(ctx, stream, subj, from, to, fn)
}

func (m *batchMux) directRange(ctx context.Context, stream, subj string, from, to uint64, fn func(raw) (bool, error)) (uint64, error) {
	var last uint64
	for {
		ctx, cancel := withTimeout(ctx)
		req, _ := json.Marshal(map[string]any{"seq": from, "next_by_subj": subj, "batch": batchSize, "max_bytes": maxBatchBytes})
		ch, done, err := m.request("$JS.API.DIRECT.GET."+stream, req, batchSize+2)
		if err != nil {
			cancel()
			return last, unavailable(ctx, "read "+subj, err)
		}
		more, n, err := func() (bool, int, error) {
			defer done()
			n := 0
			for {
				var m *nats.Msg
				select {
				case m = <-ch:
				case <-ctx.Done():
					return false, n, unavailable(ctx, "read "+subj, ctx.Err())
				}
				switch status := m.Header.Get("Status"); status {
				case "":
				case "204": // the end of this batch
					pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
					return pending > 0, n, nil
				case "404": // nothing (more) on the subject
					return false, n, nil
				case "408", "503":
					return false, n, unavailable(ctx, "read "+subj, nats.ErrNoResponders)
				default:
					return false, n, fmt.Errorf("read %s: status %s %s", subj, status, m.Header.Get("Description"))
				}
				seq, _ := strconv.ParseUint(m.Header.Get(nats.JSSequence), 10, 64)
				if seq < from || (to > 0 && seq > to) {
					return false, n, nil
				}
				n++
				at, _ := time.Parse(time.RFC3339Nano, m.Header.Get(nats.JSTimeStamp))
				ok, err := fn(raw{seq: seq, subject: m.Header.Get(nats.JSSubject), hdr: m.Header, data: m.Data, time: at})
				last, from = seq, seq+1
				if err != nil || !ok {
					return false, n, err
				}
			}
		}()
		cancel()
		if err != nil || !more || n == 0 || (to > 0 && last >= to) {
			return last, err
		}
	}
}

// leaderMsg reads one stream message from the stream's leader
// ($JS.API.STREAM.MSG.GET, which only the leader answers), so that it sees
// every write acknowledged before it, whatever the followers have applied.
// req is {"seq"}, {"last_by_subj"} or {"seq", "next_by_subj"}. A message
// that does not exist is session.ErrNotFound.
func (s *Sessions) leaderMsg(ctx context.Context, stream string, req map[string]any) (raw, error) {
	if s.beforeRead != nil {
		subj, _ := req["next_by_subj"].(string)
		if subj == "" {
			subj, _ = req["last_by_subj"].(string)
		}
		s.beforeRead(true, subj)
	}
	return leaderMsg(ctx, s.nc, stream, req)
}

func leaderMsg(ctx context.Context, nc *nats.Conn, stream string, req map[string]any) (raw, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	b, _ := json.Marshal(req)
	what := fmt.Sprintf("read %s %s", stream, b)
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, b)
	if err != nil {
		return raw{}, unavailable(ctx, what, err)
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return raw{}, unavailable(ctx, what, fmt.Errorf("%w: %q", jetstream.ErrInvalidJetStreamResponse, reply.Data))
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return raw{}, notFound(what)
		}
		return raw{}, unavailable(ctx, what, resp.Error)
	}
	if resp.Message == nil {
		return raw{}, unavailable(ctx, what, jetstream.ErrInvalidJetStreamResponse)
	}
	r := raw{seq: resp.Message.Seq, subject: resp.Message.Subject, data: resp.Message.Data, hdr: nats.Header{}, time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if r.hdr, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return raw{}, fmt.Errorf("%s: headers: %w", what, err)
		}
	}
	return r, nil
}

// kvLeaderGet reads a KV key's latest value from its bucket's leader; a
// deleted key is not found.
func kvLeaderGet(ctx context.Context, nc *nats.Conn, bucket, key string) (raw, error) {
	r, err := leaderMsg(ctx, nc, "KV_"+bucket, map[string]any{"last_by_subj": "$KV." + bucket + "." + key})
	if err != nil {
		if errorsIsNotFound(err) {
			return raw{}, notFound(key)
		}
		return raw{}, err
	}
	if op := r.hdr.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return raw{}, notFound(key)
	}
	return r, nil
}

// rangeAll reads the messages on subj from from to to, like directRange,
// and then what a lagging replica lacked from the leader, one at a time:
// every message up to to (or, with to 0, up to the leader's last on subj,
// and any appended while it reads) reaches fn. fn may stop the read by
// returning false. With beside (and to 0), the leader is asked for the
// first message from from beside the batched read: where it has none (the
// read is of a record's log, and the record is the last write: a
// create's, an import's, a commit's, a checkpoint's), nothing is left to
// ask it after the read, which costs one round trip rather than two in
// turn (issue 43); else the question was one request more. Its last
// message would say more, but would carry a create's whole entry (up to
// 512 KiB) for its sequence alone.
func (s *Sessions) rangeAll(ctx context.Context, stream, subj string, from, to uint64, beside bool, fn func(raw) (bool, error)) error {
	var none chan bool
	if beside && to == 0 {
		none = make(chan bool, 1)
		go func() {
			_, err := s.leaderMsg(ctx, stream, map[string]any{"seq": from, "next_by_subj": subj})
			none <- errorsIsNotFound(err)
		}()
	}
	stopped := false
	stale := uint64(0)
	last, err := s.directRange(ctx, stream, subj, from, to, func(r raw) (bool, error) {
		ok, err := fn(r)
		if errors.Is(err, errStale) {
			stale = r.seq
			return false, nil
		}
		stopped = !ok
		return ok, err
	})
	if err != nil || stopped {
		return err
	}
	if stale > 0 {
		last = stale - 1
	}
	next := max(last+1, from)
	if none != nil && <-none {
		return nil // the leader had nothing from from on
	}
	// Else the leader answers what follows the last message read, until
	// it has nothing more.
	for to == 0 || next <= to {
		r, err := s.leaderMsg(ctx, stream, map[string]any{"seq": next, "next_by_subj": subj})
		if errorsIsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if to > 0 && r.seq > to {
			return nil
		}
		ok, err := fn(r)
		if errors.Is(err, errStale) {
			return fmt.Errorf("%w: %s message %d does not follow what comes before it", session.ErrCorrupt, subj, r.seq)
		}
		if err != nil || !ok {
			return err
		}
		next = r.seq + 1
	}
	return nil
}

func errorsIsNotFound(err error) bool { return errors.Is(err, session.ErrNotFound) }

// errStale is what a rangeAll reader answers for a message that a lagging
// replica gave (from a deleted incarnation of the session, or past a gap):
// the read goes on from the leader, and the message is asked again there.
var errStale = errors.New("stale replica")
