package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// An append's body says what json.Marshal writes of it.
func TestAppendBodyIsWhatMarshalWrites(t *testing.T) {
	zero, neg, big := int64(0), int64(-3), int64(1)<<60
	msgs := []json.RawMessage{[]byte(`{"id":"a","role":"user","content":"hi <there> & \u2028"}`), []byte(`{"upload_id":"c-1"}`)}
	for _, b := range []appendBody{
		{SessionID: "s-1", Messages: msgs[:1]},
		{SessionID: "s-1", Messages: msgs, ExpectedHeadSeq: &zero},
		{SessionID: "weird \"<id>\" & é", Messages: msgs, ExpectedHeadSeq: &neg},
		{SessionID: "", Messages: msgs[1:], ExpectedHeadSeq: &big},
	} {
		want, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		got := b.marshal()
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("marshal wrote %s: %v", got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) || !json.Valid(got) || bytes.Contains(got, []byte{'\n'}) {
			t.Errorf("marshal = %s, json.Marshal %s", got, want)
		}
	}
}
