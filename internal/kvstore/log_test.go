package kvstore

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
)

// An entry written from its messages' JSON is the entry's JSON, with and
// without messages stored in chunks.
func TestMarshalEntryIsTheEntrysJSON(t *testing.T) {
	s := &Sessions{chunk: 4 << 10}
	msgs := []session.Message{
		{ID: "a", Seq: 7, Role: session.RoleUser, Content: session.TextContent("a \"quoted\" <question>\n")},
		{ID: "b", Seq: 8, Role: session.RoleAssistant, ToolCalls: []session.ToolCall{{ID: "c1", Type: "function", Function: session.FunctionCall{Name: "ls", Arguments: "{}"}}}},
		{ID: "c", Seq: 9, Role: session.RoleTool, ToolCallID: "c1", Content: session.TextContent(strings.Repeat("log line\n", 2000))},
	}
	for _, n := range []int{1, 2, 3} {
		e, _, whole, err := s.encodeEntry(msgs[:n])
		if err != nil {
			t.Fatal(err)
		}
		if n == 3 && e.Msgs[2].Blob == nil {
			t.Fatal("the large message is not in chunks")
		}
		want, _ := json.Marshal(e)
		if got := marshalEntry(e, whole); !bytes.Equal(got, want) {
			t.Fatalf("%d messages:\n got %s\nwant %s", n, got, want)
		}
	}
}

// entriesOf is the bundled run as log entries of four messages, as the
// store writes them.
func entriesOf(t testing.TB) [][]byte {
	msgs, err := transcript.Parse(demo.Trajectory)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i := 0; i+4 <= len(msgs); i += 4 {
		e := entry{First: int64(i + 1)}
		for j := range 4 {
			m := msgs[i+j]
			m.Seq, m.Tokens = int64(i+j+1), 17+j
			e.Msgs = append(e.Msgs, storedMsg{Message: m})
		}
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// unmarshal answers what encoding/json answers for what the store writes
// (the bundled run's entries, and a message stored in chunks) and for what
// only encoding/json takes (a name twice, invalid UTF-8, a name in other
// case).
func TestUnmarshalAnswersAsEncodingJSON(t *testing.T) {
	inputs := entriesOf(t)
	stub, _ := json.Marshal(entry{First: 3, Msgs: []storedMsg{{Message: session.Message{ID: "a", Seq: 3, Role: session.RoleTool, ToolCallID: "c", Tokens: 9}, Blob: &blobRef{Seqs: []uint64{4, 5}, Bytes: 70000, SHA256: "ab"}}}})
	inputs = append(inputs, stub,
		[]byte(`{"first":1,"msgs":[{"id":"a","seq":1,"role":"user","content":"x","content":"y"}]}`),
		[]byte("{\"first\":1,\"msgs\":[{\"id\":\"a\",\"seq\":1,\"role\":\"user\",\"content\":\"bad \xff byte\"}]}"),
		[]byte(`{"First":1,"MSGS":[{"ID":"a","seq":1,"role":"user"}]}`),
		[]byte(`{"first":1,"msgs":[{"id":"a","seq":1.5}]}`))
	for _, in := range inputs {
		var got, want entry
		gerr, werr := unmarshal(in, &got), json.Unmarshal(in, &want)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
			t.Errorf("unmarshal(%.100s) = %+v, %v; encoding/json %+v, %v", in, got, gerr, want, werr)
		}
	}
}

// BenchmarkDecodeEntry is a load's decoding: the bundled run's entries.
func BenchmarkDecodeEntry(b *testing.B) {
	entries := entriesOf(b)
	for b.Loop() {
		for _, d := range entries {
			if _, err := decodeEntry(raw{data: d}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// decodeEntryIn answers what decodeEntry answers, filtered to the range:
// on the store's entries (one of the whole run too), on an entry written
// with its names in another order (read whole instead), and it refuses
// what decodeEntry refuses.
func TestDecodeEntryInAnswersAsTheWholeDecode(t *testing.T) {
	inputs := entriesOf(t)
	msgs, _ := transcript.Parse(demo.Trajectory)
	whole := entry{First: 1}
	for i, m := range msgs {
		m.Seq = int64(i + 1)
		whole.Msgs = append(whole.Msgs, storedMsg{Message: m})
	}
	b, _ := json.Marshal(whole)
	inputs = append(inputs, b, []byte(`{"msgs":[{"id":"a","seq":4,"role":"user","content":"x"},{"id":"b","seq":5,"role":"assistant","content":"y"}],"first":4}`))
	for _, in := range inputs {
		all, err := decodeEntry(raw{data: in})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int64{{1, 1 << 40}, {all.First, all.First}, {all.First + 1, all.First + 2}, {all.last(), all.last() + 9}, {0, 0}} {
			got, last, err := decodeEntryIn(raw{data: in}, func(seq int64) bool { return seq >= r[0] && seq <= r[1] })
			var want []storedMsg
			for _, m := range all.Msgs {
				if m.Seq >= r[0] && m.Seq <= r[1] {
					want = append(want, m)
				}
			}
			if err != nil || last != all.last() || got.First != all.First || !reflect.DeepEqual(got.Msgs, want) {
				t.Fatalf("%.60s in %v: %d messages, last %d, %v; want %d, last %d", in, r, len(got.Msgs), last, err, len(want), all.last())
			}
		}
	}
	for _, bad := range []string{`{"first":1,"msgs":[]}`, `{"first":1,"msgs":[{"id":"a","seq":2,"role":"user"}]}`, `not json`} {
		if _, _, err := decodeEntryIn(raw{data: []byte(bad)}, func(seq int64) bool { return seq <= 9 }); err == nil {
			t.Errorf("%s: decoded", bad)
		}
	}
}
