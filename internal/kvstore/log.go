package kvstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/compactor/compactor/internal/session"
)

// indexEvery is the spacing of the record's index of the log: the stream
// sequence of the entry that holds message 1, 65, 129, ...
const indexEvery = 64

// RecentIDs is how many of the latest message ids the record keeps: an
// append that repeats one of them is answered, not applied again.
const RecentIDs = 128

// idHashLen is the bytes of an id's SHA-256 the record keeps.
const idHashLen = 8

// record is the record as stored: the session's record and the state of
// its log.
type record struct {
	session.Record
	Log logState `json:"log"`
	// stored is what the stored record says of the head, and when it was
	// written: the log may be ahead of it (appends write the record only
	// as a checkpoint).
	stored checkpoint
}

type checkpoint struct {
	head  int64
	bytes int64
	at    time.Time
}

// logState says where a session's data is.
type logState struct {
	// Seq is the stream sequence of the log's last committed entry: the
	// next append is written expecting it as the subject's last.
	Seq uint64 `json:"seq,omitempty"`
	// Index[k] is the stream sequence of the entry that holds message
	// k*indexEvery+1.
	Index []uint64 `json:"index,omitempty"`
	// Recent holds the hashes of the latest message ids (at most
	// RecentIDs), oldest first: the last is the head's.
	Recent []byte `json:"recent,omitempty"`
	// Last is the latest message that is not a tool result: its role and
	// the ids of its tool calls (what a tool result appended next may
	// answer).
	Last *lastCall `json:"last,omitempty"`
	// Compaction is the stream sequence of the record's compaction
	// message.
	Compaction uint64 `json:"compaction,omitempty"`
}

type lastCall struct {
	Role  session.Role `json:"role"`
	Calls []string     `json:"calls,omitempty"`
	// Open are the calls with no result yet; Known says they are tracked
	// (a record written before issue 42 does not say).
	Open  []string `json:"open,omitempty"`
	Known bool     `json:"known,omitempty"`
}

func idHash(id string) []byte {
	h := sha256.Sum256([]byte(id))
	return h[:idHashLen]
}

// recentSeq returns the seq of the message with id among the recent ones
// (0 when it is not one of them).
func (r *record) recentSeq(id string) int64 {
	h := idHash(id)
	n := len(r.Log.Recent) / idHashLen
	for i := n - 1; i >= 0; i-- {
		if string(r.Log.Recent[i*idHashLen:(i+1)*idHashLen]) == string(h) {
			return r.HeadSeq - int64(n-1-i)
		}
	}
	return 0
}

// forked is a copy of r that add may move on while r is read: its
// slices are clipped (an append copies them) and its last call copied.
func (r record) forked() record {
	r.Log.Index, r.Log.Recent = slices.Clip(r.Log.Index), slices.Clip(r.Log.Recent)
	r.PinnedSeqs = slices.Clip(r.PinnedSeqs)
	if r.Log.Last != nil {
		l := *r.Log.Last
		r.Log.Last = &l
	}
	return r
}

// add records an entry written at stream sequence seq holding msgs (the
// session's next messages).
func (r *record) add(seq uint64, msgs []session.Message) {
	for _, m := range msgs {
		if (m.Seq-1)%indexEvery == 0 {
			r.Log.Index = append(r.Log.Index, seq)
		}
		r.Log.Recent = append(r.Log.Recent, idHash(m.ID)...)
		if m.Role != session.RoleTool {
			l := &lastCall{Role: m.Role, Known: true}
			for _, tc := range m.ToolCalls {
				l.Calls = append(l.Calls, tc.ID)
			}
			l.Open = slices.Clone(l.Calls)
			r.Log.Last = l
		} else if l := r.Log.Last; l != nil {
			if i := slices.Index(l.Open, m.ToolCallID); i >= 0 {
				l.Open = slices.Delete(slices.Clone(l.Open), i, i+1)
			}
		}
		r.HeadSeq = m.Seq
		r.Bytes += int64(session.TextBytes(&m))
	}
	if over := len(r.Log.Recent) - RecentIDs*idHashLen; over > 0 {
		r.Log.Recent = slices.Clone(r.Log.Recent[over:])
	}
	r.Log.Seq = seq
}

// lastNonTool is the latest stored message that is not a tool result, as
// far as session.CheckToolResults needs it (nil when there is none), and
// its calls with no result yet (nil when not known).
func (r *record) lastNonTool() (*session.Message, []string) {
	if r.Log.Last == nil {
		return nil, []string{}
	}
	m := &session.Message{Role: r.Log.Last.Role}
	for _, id := range r.Log.Last.Calls {
		m.ToolCalls = append(m.ToolCalls, session.ToolCall{ID: id})
	}
	if !r.Log.Last.Known {
		return m, nil
	}
	return m, append([]string{}, r.Log.Last.Open...)
}

// entry is one stream message of a session's log: the messages of one
// append (or part of a create), from seq First on.
type entry struct {
	First int64       `json:"first"`
	Msgs  []storedMsg `json:"msgs"`
}

// storedMsg is a message as an entry holds it: the message itself, or,
// for one too large to share a value, a stub that names its chunks.
type storedMsg struct {
	session.Message
	Blob *blobRef `json:"blob,omitempty"`
}

// blobRef says where a large message's JSON is: the chunks at stream
// sequences Seqs on the session's .b subject, Bytes in all, with their
// SHA-256.
type blobRef struct {
	Seqs   []uint64 `json:"seqs"`
	Bytes  int      `json:"bytes"`
	SHA256 string   `json:"sha256"`
}

func (e *entry) last() int64 { return e.First + int64(len(e.Msgs)) - 1 }

// addTo adds the entry, read at stream sequence seq, to rec. A message
// stored in chunks is a stub here: it counts its JSON's size.
func (e *entry) addTo(rec *record, seq uint64) {
	msgs := make([]session.Message, len(e.Msgs))
	for i := range e.Msgs {
		msgs[i] = e.Msgs[i].Message
		if b := e.Msgs[i].Blob; b != nil {
			rec.Bytes += int64(b.Bytes)
		}
	}
	rec.add(seq, msgs)
}

// unmarshal decodes messages the store wrote: with encoding/json/v2's
// reference implementation (go-json-experiment), names matched in any case
// as encoding/json matches them, 2.3x faster than encoding/json on a log
// entry (BenchmarkDecodeEntry) — every load decodes the context's messages
// — and, where it refuses what encoding/json takes (a name twice, invalid
// UTF-8: nothing the service writes), from scratch with encoding/json,
// which answers as before.
func unmarshal[T any](data []byte, v *T) error {
	if jsonv2.Unmarshal(data, v, jsonv2.MatchCaseInsensitiveNames(true)) == nil {
		return nil
	}
	var zero T
	*v = zero
	return json.Unmarshal(data, v)
}

func decodeEntry(r raw) (entry, error) {
	var e entry
	if err := unmarshal(r.data, &e); err != nil || len(e.Msgs) == 0 {
		if err == nil {
			err = errors.New("no messages")
		}
		return entry{}, fmt.Errorf("%w: log entry %d does not decode: %v", session.ErrCorrupt, r.seq, err)
	}
	for i := range e.Msgs {
		if e.Msgs[i].Seq != e.First+int64(i) {
			return entry{}, fmt.Errorf("%w: log entry %d: message %d says seq %d", session.ErrCorrupt, r.seq, e.First+int64(i), e.Msgs[i].Seq)
		}
	}
	return e, nil
}

// readSeqs reads the messages with seqs (ascending, each in 1..head) of
// the session rec names, in order. Large messages are read whole with
// resolve, and as their stubs (id, seq, role, tool_call_id and tokens)
// with their blobRef at the same index otherwise.
func (s *Sessions) readSeqs(ctx context.Context, w where, rec *record, seqs []int64, resolve bool) ([]session.Message, []*blobRef, error) {
	out := make([]session.Message, 0, len(seqs))
	refs := make([]*blobRef, 0, len(seqs))
	for i := 0; i < len(seqs); {
		// A run of seqs one entry read can serve: from the index point
		// at or before its first, while the seqs are near each other, or
		// start at the same entry (one of thousands of messages, written
		// by a create or an import, is read once).
		j := i + 1
		for j < len(seqs) && (seqs[j]-seqs[j-1] <= indexEvery || s.indexEntry(rec, seqs[j]) == s.indexEntry(rec, seqs[i])) {
			j++
		}
		want := seqs[i:j]
		wanted := func(seq int64) bool { _, ok := slices.BinarySearch(want, seq); return ok }
		err := s.scan(ctx, w, rec, want[0], want[len(want)-1], wanted, func(m storedMsg) error {
			out, refs = append(out, m.Message), append(refs, m.Blob)
			return nil
		})
		if err != nil {
			return nil, nil, err
		}
		i = j
	}
	if len(out) != len(seqs) {
		return nil, nil, s.lost(ctx, w, rec, fmt.Sprintf("messages %d..%d (read %d of %d)", seqs[0], seqs[len(seqs)-1], len(out), len(seqs)))
	}
	if resolve {
		for i, ref := range refs {
			if ref == nil {
				continue
			}
			m, err := s.blob(ctx, w, rec, seqs[i], ref)
			if err != nil {
				return nil, nil, err
			}
			out[i], refs[i] = m, nil
		}
	}
	return out, refs, nil
}

// indexEntry is the stream sequence of the entry the record's index
// point at or before seq names (0 past the index).
func (s *Sessions) indexEntry(rec *record, seq int64) uint64 {
	if k := int((seq - 1) / indexEvery); k < len(rec.Log.Index) {
		return rec.Log.Index[k]
	}
	return 0
}

// scan calls fn with every message from seq from to to (in 1..head) of
// the session's committed log that wanted wants, in order, large ones as
// stubs; the others are not decoded.
func (s *Sessions) scan(ctx context.Context, w where, rec *record, from, to int64, wanted func(int64) bool, fn func(storedMsg) error) error {
	if from < 1 || to > rec.HeadSeq || from > to {
		return fmt.Errorf("%w: messages %d..%d outside 1..%d", session.ErrInvalid, from, to, rec.HeadSeq)
	}
	k := int((from - 1) / indexEvery)
	if k >= len(rec.Log.Index) {
		return fmt.Errorf("session %s: %w: the record's index has %d points for %d messages", w.sid, session.ErrCorrupt, len(rec.Log.Index), rec.HeadSeq)
	}
	start := rec.Log.Index[k]
	next := int64(k*indexEvery + 1) // the first seq the entry at start holds, at most
	first := true
	err := s.rangeAll(ctx, w.dataStream(), w.subject("log"), start, rec.Log.Seq, false, func(r raw) (bool, error) {
		if r.epoch() != rec.Epoch {
			return false, errStale
		}
		e, last, err := decodeEntryIn(r, func(seq int64) bool { return seq >= from && seq <= to && wanted(seq) })
		if err != nil {
			return false, err
		}
		if first {
			// The index point's entry holds message k*indexEvery+1.
			if r.seq != start || e.First > next || last < next {
				return false, errStale
			}
			first = false
		} else if e.First != next {
			return false, errStale
		}
		for _, m := range e.Msgs {
			if err := fn(m); err != nil {
				return false, err
			}
		}
		next = last + 1
		return next <= to, nil
	})
	if errors.Is(err, session.ErrCorrupt) {
		return s.lost(ctx, w, rec, fmt.Sprintf("log from message %d (%v)", from, err))
	}
	return err
}

// lost explains data the record names and the leader lacks: the session
// was deleted meanwhile (not found), or its state is corrupt.
func (s *Sessions) lost(ctx context.Context, w where, rec *record, what string) error {
	now, err := s.rawRecord(ctx, w)
	if errors.Is(err, session.ErrNotFound) || err == nil && (now.Deleted || now.Epoch != rec.Epoch) {
		return notFound("session " + w.sid)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("session %s: %w: %s is missing", w.sid, session.ErrCorrupt, what)
}

// blob reassembles a large message from its chunks and checks its digest.
func (s *Sessions) blob(ctx context.Context, w where, rec *record, seq int64, ref *blobRef) (session.Message, error) {
	if len(ref.Seqs) == 0 {
		return session.Message{}, fmt.Errorf("session %s message %d: %w: a large message without chunks", w.sid, seq, session.ErrCorrupt)
	}
	chunks := make(map[uint64][]byte, len(ref.Seqs))
	want := map[uint64]bool{}
	for _, q := range ref.Seqs {
		want[q] = true
	}
	err := s.rangeAll(ctx, w.dataStream(), w.subject("b"), ref.Seqs[0], ref.Seqs[len(ref.Seqs)-1], false, func(r raw) (bool, error) {
		if want[r.seq] {
			if r.epoch() != rec.Epoch {
				return false, errStale
			}
			chunks[r.seq] = r.data
		}
		return true, nil
	})
	if err != nil {
		return session.Message{}, err
	}
	buf := make([]byte, 0, ref.Bytes)
	for n, q := range ref.Seqs {
		c, ok := chunks[q]
		if !ok {
			return session.Message{}, s.lost(ctx, w, rec, fmt.Sprintf("chunk %d of message %d", n, seq))
		}
		buf = append(buf, c...)
	}
	sum := sha256.Sum256(buf)
	if len(buf) != ref.Bytes || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return session.Message{}, fmt.Errorf("session %s message %d: %w: its chunks do not match their digest", w.sid, seq, session.ErrCorrupt)
	}
	var m session.Message
	if err := unmarshal(buf, &m); err != nil || m.Seq != seq {
		return session.Message{}, fmt.Errorf("session %s message %d: %w: it does not decode", w.sid, seq, session.ErrCorrupt)
	}
	return m, nil
}

// encodeEntry is the entry of msgs (their seqs and ids set) and the
// chunks to write before it: a message over one value is stored in
// chunks, and, while the entry is still over one value, so is the largest
// of the others.
func (s *Sessions) encodeEntry(msgs []session.Message) (entry, [][][]byte, [][]byte, error) {
	e := entry{First: msgs[0].Seq, Msgs: make([]storedMsg, len(msgs))}
	sizes := make([]int, len(msgs))
	whole := make([][]byte, len(msgs))
	total := 0
	for i := range msgs {
		b, err := marshalMessage(&msgs[i])
		if err != nil {
			return entry{}, nil, nil, fmt.Errorf("%w: message %s: %v", session.ErrInvalid, msgs[i].ID, err)
		}
		if len(b) > MaxMessageBytes {
			return entry{}, nil, nil, fmt.Errorf("%w: message %s is %d bytes as JSON, over %d", session.ErrInvalid, msgs[i].ID, len(b), MaxMessageBytes)
		}
		e.Msgs[i] = storedMsg{Message: msgs[i]}
		whole[i], sizes[i] = b, len(b)
		total += len(b) + 1
	}
	chunks := make([][][]byte, len(msgs))
	budget := s.chunk - 64
	for total > budget {
		big := -1
		for i := range sizes {
			if chunks[i] == nil && sizes[i] > 256 && (big < 0 || sizes[i] > sizes[big]) {
				big = i
			}
		}
		if big < 0 {
			return entry{}, nil, nil, fmt.Errorf("%w: %d messages are over one value even as stubs: send fewer at once", session.ErrInvalid, len(msgs))
		}
		b := whole[big]
		for len(b) > 0 {
			c := min(len(b), s.chunk)
			chunks[big] = append(chunks[big], b[:c])
			b = b[c:]
		}
		m := msgs[big]
		sum := sha256.Sum256(whole[big])
		e.Msgs[big] = storedMsg{Message: session.Message{ID: m.ID, Seq: m.Seq, Role: m.Role, Tokens: m.Tokens, ToolCallID: m.ToolCallID},
			Blob: &blobRef{Bytes: len(whole[big]), SHA256: hex.EncodeToString(sum[:])}}
		stub, _ := json.Marshal(e.Msgs[big])
		total += len(stub) - sizes[big]
		sizes[big] = len(stub)
	}
	return e, chunks, whole, nil
}

// marshalMessage is m's JSON: session.AppendJSON's, else json.Marshal's.
func marshalMessage(m *session.Message) ([]byte, error) {
	if b, ok := session.AppendJSON(nil, m); ok {
		return b, nil
	}
	return json.Marshal(m)
}

// marshalEntry is the JSON of e, whose messages without a blob are
// whole[i] already (a storedMsg without a blob encodes as its message
// does): each message is encoded once.
func marshalEntry(e entry, whole [][]byte) []byte {
	n := 32
	for i := range e.Msgs {
		n += len(whole[i]) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"first":`...)
	b = strconv.AppendInt(b, e.First, 10)
	b = append(b, `,"msgs":[`...)
	for i := range e.Msgs {
		if i > 0 {
			b = append(b, ',')
		}
		if e.Msgs[i].Blob != nil {
			stub, _ := json.Marshal(e.Msgs[i])
			b = append(b, stub...)
		} else {
			b = append(b, whole[i]...)
		}
	}
	return append(b, "]}"...)
}

// decodeEntryIn decodes the messages of entry r whose seqs wanted wants,
// and says the entry's last seq: the others are stepped over, not
// decoded (a session created or imported in one call is an entry of
// thousands of messages, of which a read of a few wants a few). Anything
// unusual is decoded whole by decodeEntry, which says what is wrong.
func decodeEntryIn(r raw, wanted func(int64) bool) (entry, int64, error) {
	e, last, ok := stepEntry(r.data, wanted)
	if !ok {
		whole, err := decodeEntry(r)
		if err != nil {
			return entry{}, 0, err
		}
		e = entry{First: whole.First}
		for _, m := range whole.Msgs {
			if wanted(m.Seq) {
				e.Msgs = append(e.Msgs, m)
			}
		}
		return e, whole.last(), nil
	}
	return e, last, nil
}

// stepEntry reads an entry as marshalEntry writes it ({"first":N,
// "msgs":[...]}), decoding only the messages wanted wants; false when
// the entry is not so written or a message does not say its seq.
func stepEntry(data []byte, wanted func(int64) bool) (entry, int64, bool) {
	// Stepped-over messages are not checked (names twice, UTF-8): the
	// ones decoded are, by unmarshal.
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var e entry
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '{' {
		return e, 0, false
	}
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '"' || t.String() != "first" {
		return e, 0, false
	}
	first, err := dec.ReadToken()
	if err != nil || first.Kind() != '0' {
		return e, 0, false
	}
	e.First = first.Int()
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '"' || t.String() != "msgs" {
		return e, 0, false
	}
	if t, err := dec.ReadToken(); err != nil || t.Kind() != '[' {
		return e, 0, false
	}
	n := int64(0)
	for dec.PeekKind() != ']' {
		v, err := dec.ReadValue()
		if err != nil {
			return e, 0, false
		}
		if seq := e.First + n; wanted(seq) {
			var m storedMsg
			if unmarshal(v, &m) != nil || m.Seq != seq {
				return e, 0, false
			}
			e.Msgs = append(e.Msgs, m)
		}
		n++
	}
	if n == 0 {
		return e, 0, false
	}
	return e, e.First + n - 1, true
}
