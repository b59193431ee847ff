package legacystore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/session"
)

// multiGetMax is how many subjects one batched direct get may ask for (the
// server answers at most 1,024 per request).
const multiGetMax = 1000

// value is a stored value with its headers and revision.
type value struct {
	data []byte
	hdr  nats.Header
	rev  uint64
}

func (v value) epoch() string { return v.hdr.Get(hdrEpoch) }

// leaderGet reads a key's latest value from the stream leader
// ($JS.API.STREAM.MSG.GET, which only the leader answers), so that it sees
// every write acknowledged before it, whatever the followers have applied.
func (s *Sessions) leaderGet(ctx context.Context, key string) (value, error) {
	return leaderGet(ctx, s.nc, SessionsBucket, key)
}

func leaderGet(ctx context.Context, nc *nats.Conn, bucket, key string) (value, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req, _ := json.Marshal(map[string]string{"last_by_subj": subject(bucket, key)})
	reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+bucket, req)
	if err != nil {
		return value{}, unavailable(ctx, "read "+key, err)
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
		return value{}, unavailable(ctx, "read "+key, fmt.Errorf("%w: %q", jetstream.ErrInvalidJetStreamResponse, reply.Data))
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound {
			return value{}, notFound(key)
		}
		return value{}, unavailable(ctx, "read "+key, resp.Error)
	}
	if resp.Message == nil {
		return value{}, unavailable(ctx, "read "+key, jetstream.ErrInvalidJetStreamResponse)
	}
	v := value{data: resp.Message.Data, rev: resp.Message.Seq, hdr: nats.Header{}}
	if len(resp.Message.Header) > 0 {
		if v.hdr, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return value{}, fmt.Errorf("read %s: headers: %w", key, err)
		}
	}
	if op := v.hdr.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return value{}, notFound(key)
	}
	return v, nil
}

// getMany reads the latest values of keys with batched direct gets
// (multi_last): one request and one streamed answer per 1,000 keys instead
// of a round trip per key. Keys that do not exist, or were deleted, are
// absent from the map. A direct get may be answered by any replica, so a
// value may be missing or old on a cluster: callers that need the latest
// state check it (epochs) and read what is missing from the leader.
func (s *Sessions) getMany(ctx context.Context, keys []string) (map[string]value, error) {
	out := make(map[string]value, len(keys))
	err := s.eachValue(ctx, keys, func(k string, v value) error { out[k] = v; return nil })
	return out, err
}

// eachValue calls fn with each existing key's latest value as it arrives,
// so a long read holds no map of raw values.
func (s *Sessions) eachValue(ctx context.Context, keys []string, fn func(key string, v value) error) error {
	for len(keys) > 0 {
		n := min(len(keys), multiGetMax)
		if err := s.multiGet(ctx, keys[:n], fn); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

func (s *Sessions) multiGet(ctx context.Context, keys []string, fn func(key string, v value) error) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	pending := make(map[string]bool, len(keys))
	subjects := make([]string, 0, len(keys))
	for _, k := range keys {
		if subj := subject(SessionsBucket, k); !pending[subj] {
			pending[subj] = true
			subjects = append(subjects, subj)
		}
	}
	prefix := len(subject(SessionsBucket, ""))
	// A reply stops early past the server's max bytes; ask again for the
	// rest, which is bounded because each round returns at least one value.
	for round := 0; len(subjects) > 0; round++ {
		if round > len(keys) {
			return fmt.Errorf("batched get: no progress after %d rounds", round)
		}
		req, _ := json.Marshal(struct {
			MultiLast []string `json:"multi_last"`
			Batch     int      `json:"batch"`
		}{subjects, len(subjects)})
		inbox := s.nc.NewRespInbox()
		sub, err := s.nc.SubscribeSync(inbox)
		if err != nil {
			return unavailable(ctx, "batched get", err)
		}
		err = func() error {
			defer sub.Unsubscribe()
			if err := s.nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+SessionsBucket, inbox, req); err != nil {
				return unavailable(ctx, "batched get", err)
			}
			for {
				m, err := sub.NextMsgWithContext(ctx)
				if err != nil {
					return unavailable(ctx, "batched get", err)
				}
				switch status := m.Header.Get("Status"); status {
				case "":
				case "204", "404": // end of batch; none of the subjects exists
					return nil
				case "503":
					return unavailable(ctx, "batched get", nats.ErrNoResponders)
				default:
					return fmt.Errorf("batched get: status %s %s", status, m.Header.Get("Description"))
				}
				subj := m.Header.Get(nats.JSSubject)
				if !pending[subj] {
					continue
				}
				delete(pending, subj)
				if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
					continue
				}
				rev, _ := strconv.ParseUint(m.Header.Get(nats.JSSequence), 10, 64)
				if err := fn(subj[prefix:], value{data: m.Data, hdr: m.Header, rev: rev}); err != nil {
					return err
				}
			}
		}()
		if err != nil {
			return err
		}
		rest := subjects[:0]
		for _, subj := range subjects {
			if pending[subj] {
				rest = append(rest, subj)
			}
		}
		if len(rest) == len(subjects) {
			return nil // the others do not exist
		}
		subjects = rest
	}
	return nil
}

// getAll reads keys that must exist in the session of epoch (named by its
// record): batched direct gets first, then, for each value a replica lacks
// or holds from another epoch, a read from the leader. A key the leader
// lacks too is absent from the map.
func (s *Sessions) getAll(ctx context.Context, keys []string, epoch string) (map[string]value, error) {
	got, err := s.getMany(ctx, keys)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		if v, ok := got[k]; ok && (epoch == "" || v.epoch() == epoch) {
			continue
		}
		delete(got, k)
		v, err := s.leaderGet(ctx, k)
		if errors.Is(err, session.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if epoch == "" || v.epoch() == epoch {
			got[k] = v
		}
	}
	return got, nil
}

// rawRecord reads the record from the leader, pending and deleted ones
// included.
func (s *Sessions) rawRecord(ctx context.Context, sid string) (session.Record, error) {
	v, err := s.leaderGet(ctx, recKey(sid))
	if errors.Is(err, session.ErrNotFound) {
		return session.Record{}, notFound("session " + sid)
	}
	if err != nil {
		return session.Record{}, err
	}
	var r session.Record
	if err := json.Unmarshal(v.data, &r); err != nil || r.SessionID != sid {
		if err == nil {
			err = fmt.Errorf("it names session %q", r.SessionID)
		}
		return session.Record{}, fmt.Errorf("session %s: %w: the record does not decode: %v", sid, session.ErrCorrupt, err)
	}
	r.Revision = v.rev
	return r, nil
}

// record reads a visible record from the leader: a create still being
// written and a delete under way are not found.
func (s *Sessions) record(ctx context.Context, sid string) (session.Record, error) {
	r, err := s.rawRecord(ctx, sid)
	if err == nil && !r.Visible() {
		return session.Record{}, notFound("session " + sid)
	}
	return r, err
}

// stored is a message as a KV value: the message itself, or, for one too
// large for a value, a stub that names its chunks.
type stored struct {
	session.Message
	Blob *blobRef `json:"blob,omitempty"`
}

// blobRef says where a large message's JSON is: Chunks values
// <sid>.b.<seq>.<n>, Bytes in all, with their SHA-256.
type blobRef struct {
	Chunks int    `json:"chunks"`
	Bytes  int    `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// messages reads the messages with seqs of the session named by rec, in
// order. A message the record says exists and the leader lacks is corrupt
// state, unless the session was deleted meanwhile.
func (s *Sessions) messages(ctx context.Context, rec session.Record, seqs []int64) ([]session.Message, error) {
	msgs, _, err := s.readMessages(ctx, rec, seqs, true)
	return msgs, err
}

// readMessages is messages; without resolve, a large message is answered
// as its stub (id, seq, role, tool_call_id and tokens) with its blobRef at
// the same index, its chunks unread.
func (s *Sessions) readMessages(ctx context.Context, rec session.Record, seqs []int64, resolve bool) ([]session.Message, []*blobRef, error) {
	sid := rec.SessionID
	keys := make([]string, len(seqs))
	at := make(map[string]int, len(seqs))
	for i, seq := range seqs {
		keys[i] = msgKey(sid, seq)
		at[keys[i]] = i
	}
	out := make([]session.Message, len(seqs))
	got := make([]bool, len(seqs))
	refs := make([]*blobRef, len(seqs)) // of stubs
	decode := func(k string, v value) error {
		i := at[k]
		var st stored
		if err := json.Unmarshal(v.data, &st); err != nil {
			return fmt.Errorf("session %s message %d: %w: %v", sid, seqs[i], session.ErrCorrupt, err)
		}
		if st.Seq != seqs[i] {
			return fmt.Errorf("session %s message %d: %w: it says seq %d", sid, seqs[i], session.ErrCorrupt, st.Seq)
		}
		out[i], got[i], refs[i] = st.Message, true, st.Blob
		return nil
	}
	var missing []string
	err := s.eachValue(ctx, keys, func(k string, v value) error {
		if rec.Epoch != "" && v.epoch() != rec.Epoch {
			return nil // another incarnation's, on a lagging replica
		}
		return decode(k, v)
	})
	if err != nil {
		return nil, nil, err
	}
	for i, ok := range got {
		if !ok {
			missing = append(missing, keys[i])
		}
	}
	if len(missing) > 0 {
		vals, err := s.getAll(ctx, missing, rec.Epoch)
		if err != nil {
			return nil, nil, err
		}
		for _, k := range missing {
			v, ok := vals[k]
			if !ok {
				return nil, nil, s.lost(ctx, rec, fmt.Sprintf("message %d", seqs[at[k]]))
			}
			if err := decode(k, v); err != nil {
				return nil, nil, err
			}
		}
	}
	if !resolve {
		return out, refs, nil
	}
	for i, ref := range refs {
		if ref == nil {
			continue
		}
		if out[i], err = s.blob(ctx, rec, seqs[i], ref); err != nil {
			return nil, nil, err
		}
		refs[i] = nil
	}
	return out, refs, nil
}

// lost explains a value the record names and the leader lacks: the session
// was deleted meanwhile (not found), or its state is corrupt.
func (s *Sessions) lost(ctx context.Context, rec session.Record, what string) error {
	now, err := s.rawRecord(ctx, rec.SessionID)
	if errors.Is(err, session.ErrNotFound) || err == nil && (now.Deleted || now.Epoch != rec.Epoch) {
		return notFound("session " + rec.SessionID)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("session %s: %w: %s is missing", rec.SessionID, session.ErrCorrupt, what)
}

// blob reassembles a large message from its chunks and checks its digest.
func (s *Sessions) blob(ctx context.Context, rec session.Record, seq int64, ref *blobRef) (session.Message, error) {
	keys := make([]string, ref.Chunks)
	for n := range keys {
		keys[n] = chunkKey(rec.SessionID, seq, n)
	}
	vals, err := s.getAll(ctx, keys, rec.Epoch)
	if err != nil {
		return session.Message{}, err
	}
	buf := make([]byte, 0, ref.Bytes)
	for n, k := range keys {
		v, ok := vals[k]
		if !ok {
			return session.Message{}, s.lost(ctx, rec, fmt.Sprintf("chunk %d of message %d", n, seq))
		}
		buf = append(buf, v.data...)
	}
	sum := sha256.Sum256(buf)
	if len(buf) != ref.Bytes || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return session.Message{}, fmt.Errorf("session %s message %d: %w: its chunks do not match their digest", rec.SessionID, seq, session.ErrCorrupt)
	}
	var m session.Message
	if err := json.Unmarshal(buf, &m); err != nil || m.Seq != seq {
		return session.Message{}, fmt.Errorf("session %s message %d: %w: it does not decode", rec.SessionID, seq, session.ErrCorrupt)
	}
	return m, nil
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for seq := from; seq <= to; seq++ {
		out = append(out, seq)
	}
	return out
}

// compaction reads a compaction the record names: it must exist.
func (s *Sessions) compaction(ctx context.Context, rec session.Record, id string) (*session.Message, error) {
	k := compKey(rec.SessionID, id)
	vals, err := s.getAll(ctx, []string{k}, rec.Epoch)
	if err != nil {
		return nil, err
	}
	v, ok := vals[k]
	if !ok {
		return nil, s.lost(ctx, rec, "compaction "+id)
	}
	return decodeCompaction(rec.SessionID, id, v.data)
}

func decodeCompaction(sid, id string, data []byte) (*session.Message, error) {
	var m session.Message
	if err := json.Unmarshal(data, &m); err != nil || m.ID != id {
		return nil, fmt.Errorf("session %s compaction %s: %w: it does not decode", sid, id, session.ErrCorrupt)
	}
	return &m, nil
}

// Record returns the session's record.
func (s *Sessions) Record(ctx context.Context, sid string) (session.Record, error) {
	if err := checkID(sid); err != nil {
		return session.Record{}, notFound("session " + sid)
	}
	return s.record(ctx, sid)
}

// History returns every message and every committed compaction of a
// session (the record's chain, oldest first). Each message a compaction
// covers has summarised_by set to it; a compaction message written by a
// writer that then lost its commit is neither listed nor marks anything.
func (s *Sessions) History(ctx context.Context, sid string) ([]session.Message, []session.Message, error) {
	rec, err := s.Record(ctx, sid)
	if err != nil {
		return nil, nil, err
	}
	msgs, err := s.messages(ctx, rec, seqRange(1, rec.HeadSeq))
	if err != nil {
		return nil, nil, err
	}
	lister, err := s.kv.ListKeysFiltered(ctx, sid+".c.*")
	if err != nil {
		return nil, nil, unavailable(ctx, "list compactions", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	vals, err := s.getMany(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*session.Message, len(vals))
	for k, v := range vals {
		if rec.Epoch != "" && v.epoch() != rec.Epoch {
			continue
		}
		id := k[len(sid)+len(".c."):]
		m, err := decodeCompaction(sid, id, v.data)
		if err != nil {
			return nil, nil, err
		}
		byID[id] = m
	}
	pinned := map[int64]bool{}
	for _, seq := range rec.PinnedSeqs {
		pinned[seq] = true
	}
	// The committed compactions are the record's chain; one written by a
	// writer that then lost its commit is not part of the history.
	var comps []session.Message
	for id := rec.CompactionID; id != "" && len(comps) <= rec.Compactions; {
		c := byID[id]
		if c == nil { // a replica behind: the leader has it
			if c, err = s.compaction(ctx, rec, id); err != nil {
				return nil, nil, err
			}
		}
		if c.Compaction == nil {
			return nil, nil, fmt.Errorf("session %s compaction %s: %w: no metadata", sid, id, session.ErrCorrupt)
		}
		for seq := c.Compaction.FromSeq; seq <= c.Compaction.ToSeq && seq <= int64(len(msgs)); seq++ {
			if seq >= 1 && !pinned[seq] {
				msgs[seq-1].SummarisedBy = id
			}
		}
		comps = append(comps, *c)
		id = c.Compaction.Previous
	}
	slices.Reverse(comps) // oldest first
	return msgs, comps, nil
}
