package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/compactor/compactor/internal/demo"
	"github.com/compactor/compactor/internal/session"
	"github.com/compactor/compactor/internal/transcript"
)

// parseAtOnce answers only what checkMessages and transcript.Parse answer
// together, and answers the usual append.
func TestParseAtOnceAnswersAsCheckAndParse(t *testing.T) {
	inputs, n := messageInputs(t)
	fast := 0
	for _, in := range inputs {
		raw := json.RawMessage(in)
		got, ok := parseAtOnce(raw)
		want, err := checkAndParse(raw)
		if !ok {
			continue
		}
		fast++
		if err != nil {
			t.Errorf("parseAtOnce took %.80s, which check and parse refuse: %v", in, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("parseAtOnce(%.80s) = %+v, check and parse %+v", in, got, want)
		}
	}
	// Every message of the bundled run, the run whole, and the plain
	// crafted ones.
	if fast < n {
		t.Fatalf("parseAtOnce took %d inputs, want at least %d", fast, n)
	}
}

// decodeAppendAtOnce answers only what the endpoint's long way answers
// (the body decoded, its session id checked, its messages checked and
// parsed), and answers the usual append.
func TestDecodeAppendAtOnceAnswersAsTheLongWay(t *testing.T) {
	inputs, n := messageInputs(t)
	var bodies []string
	for _, in := range inputs {
		bodies = append(bodies, `{"session_id":"s-1","messages":`+in+`}`)
	}
	bodies = append(bodies,
		`{"session_id":"s-1","messages":[{"role":"user","content":"hi"}],"expected_head_seq":4}`,
		`{"session_id":"s-1","messages":[{"role":"user","content":"hi"}],"expected_head_seq":null}`,
		`{"session_id":"s 1","messages":[{"role":"user","content":"hi"}]}`,
		`{"session_id":"","messages":[{"role":"user","content":"hi"}]}`,
		`{"session_id":"s-1","session_id":"s-2","messages":[{"role":"user","content":"hi"}]}`,
		`{"session_id":"s-1","messages":[{"role":"user","content":"hi","role":"assistant"}]}`,
		`{"session_id":"s-1","messages":[{"role":"user","content":"hi"}],"colour":1}`,
		`{"session_id":"s-1","messages":[{"role":"user","content":"hi"}]} {}`,
		`{"session_id":"s-1","messages":null}`, `{"session_id":"s-1"}`, ``, `[]`,
		`{"session_id":"s-ÿ","messages":[{"role":"user","content":"hi"}]}`,
	)
	fast := 0
	for _, body := range bodies {
		if differs := againstTheLongWay(body); differs != "" {
			t.Error(differs)
		}
		if _, _, ok := decodeAppendAtOnce([]byte(body)); ok {
			fast++
		}
	}
	if fast < n+2 {
		t.Fatalf("decodeAppendAtOnce took %d bodies, want at least %d", fast, n+2)
	}
}

// The fast decode of an append body never takes one the long way answers
// otherwise, whatever its bytes.
func FuzzDecodeAppendAtOnce(f *testing.F) {
	f.Add(`{"session_id":"s-1","messages":[{"role":"user","content":"hi"}],"expected_head_seq":4}`)
	f.Add(`{"session_id":"s-1","messages":[{"id":"a","role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}"}}]}]}`)
	f.Add(`{"session_id":"s-1","messages":[{"role":"tool","tool_call_id":"c1","content":"a\u0000b \ud83d\ude00 \ud800"}]}`)
	f.Add(`{"session_id":"s-1","messages":[{"role":"user","content":"hi","seq":1,"tokens":2,"is_compaction":false}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		if differs := againstTheLongWay(body); differs != "" {
			t.Fatal(differs)
		}
	})
}

// againstTheLongWay says how decodeAppendAtOnce's answer for an append
// body differs from the long way's ("" when it does not, or when the fast
// path does not take the body).
func againstTheLongWay(body string) string {
	b, got, ok := decodeAppendAtOnce([]byte(body))
	if !ok {
		return ""
	}
	var want AppendBody
	err := decodeBody([]byte(body), &want)
	if err == nil {
		err = checkSessionID(want.SessionID)
	}
	var msgs []session.Message
	if err == nil {
		msgs, err = parseMessages(want.Messages, false)
	}
	if err != nil {
		return fmt.Sprintf("decodeAppendAtOnce took %.80q, which the long way refuses: %v", body, err)
	}
	if b.SessionID != want.SessionID || !reflect.DeepEqual(b.ExpectedHeadSeq, want.ExpectedHeadSeq) || !reflect.DeepEqual(got, msgs) {
		return fmt.Sprintf("decodeAppendAtOnce(%.80q) = %+v %+v, the long way %+v %+v", body, b, got, want, msgs)
	}
	return ""
}

// BenchmarkDecodeAppend is an append's body, one agent message a request,
// as the endpoint decodes it.
func BenchmarkDecodeAppend(b *testing.B) {
	msgs, _ := transcript.Parse(demo.Trajectory)
	bodies := make([][]byte, len(msgs))
	for i := range msgs {
		bodies[i], _ = json.Marshal(map[string]any{"session_id": "s-1", "messages": msgs[i : i+1]})
	}
	for b.Loop() {
		for _, raw := range bodies {
			if _, _, ok := decodeAppendAtOnce(raw); !ok {
				b.Fatalf("not decoded at once: %.200s", raw)
			}
		}
	}
}

func checkAndParse(raw json.RawMessage) ([]session.Message, error) {
	if err := checkMessages(raw); err != nil {
		return nil, err
	}
	return transcript.Parse(raw)
}

// messageInputs are messages arrays: each message of the bundled run, the
// run whole, and crafted ones, good and bad; n of them are plain.
func messageInputs(t *testing.T) (inputs []string, n int) {
	msgs, err := transcript.Parse(demo.Trajectory)
	if err != nil {
		t.Fatal(err)
	}
	for i := range msgs {
		b, _ := json.Marshal(msgs[i : i+1])
		inputs = append(inputs, string(b))
	}
	all, _ := json.Marshal(msgs)
	inputs = append(inputs, string(all),
		`[{"role":"user","content":"hi"}]`,
		`[{"id":7,"role":"user","content":"hi"}]`,
		`[{"id":null,"role":"user","content":null}]`,
		`[{"id":"a","role":"assistant","content":"","tool_calls":[{"id":"c1","function":{"name":"ls","arguments":"{}"}}]}]`,
		`[{"id":"a","role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"ls","arguments":"{}","x":1}}]}]`,
		`[{"id":"a","role":"tool","tool_call_id":"c1","content":"out"}]`,
		`[{"id":"a","role":"tool","tool_call_ids":["c1"],"content":"out"}]`,
		`[{"id":"a","role":"user","content":"hi","seq":4,"tokens":9,"is_compaction":false,"summarised_by":"x"}]`,
		`[{"id":"a","role":"user","content":"hi","colour":"red"}]`,
		`[{"upload_id":"u1"}]`,
		`[{"upload_id":"u1","role":"user"}]`,
		`[{"role":"user","content":[{"type":"text","text":"hi"}]}]`,
		`[{"role":"user","content":[{"type":"video","text":"hi"}]}]`,
		`[{"role":"user","content":5}]`,
		`[{"role":"","content":"hi"}]`,
		`[{"role":"wizard","content":"hi"}]`,
		`[{"role":"user","content":"hi"}] [1]`,
		`[{"role":"user","content":"bad \xff byte"}]`,
		`[null]`, `[]`, `[1]`, `{"messages":[{"role":"user","content":"hi"}]}`,
		`[{"Role":"user","CONTENT":"case"}]`,
		`[{"id":{"x":1},"role":"user","content":"hi"}]`,
		`[{"role":"user","content":"hi\u0000there \ud83d\ude00"}]`,
	)
	return inputs, len(msgs) + 1 + 7
}

// BenchmarkParseMessages is an append's messages, one agent message a
// request, as the endpoint parses them.
func BenchmarkParseMessages(b *testing.B) {
	msgs, _ := transcript.Parse(demo.Trajectory)
	bodies := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		bodies[i], _ = json.Marshal(msgs[i : i+1])
	}
	b.ResetTimer()
	for b.Loop() {
		for _, raw := range bodies {
			if _, err := parseMessages(raw, false); err != nil {
				b.Fatal(err)
			}
		}
	}
}
