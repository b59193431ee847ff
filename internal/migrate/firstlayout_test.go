package migrate_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/compactor/compactor/internal/legacystore"
)

// storedValue is one message of the old layout's bucket stream as its
// writer left it.
type storedValue struct {
	Seq     uint64              `json:"seq"`
	Subject string              `json:"subject"`
	Header  map[string][]string `json:"header,omitempty"`
	Data    []byte              `json:"data"`
}

// loadFirstLayout makes the old layout's bucket and writes path's values
// into its stream, each at its stream sequence (the first layout's
// records name values by it): a sequence the writer left empty (a value
// replaced or purged) is filled, and purged again. The headers the writer
// sent to guard its writes (atomic batches, expected sequences) and those
// the server added to the reads that made the file are left out; the
// values' own (their epoch) are kept.
func loadFirstLayout(t *testing.T, js jetstream.JetStream, path string) {
	t.Helper()
	ctx := context.Background()
	if err := legacystore.Provision(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+legacystore.SessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(zr)
	sc.Buffer(nil, 4<<20)
	next, values := uint64(1), 0
	var gaps []uint64
	gap := "$KV." + legacystore.SessionsBucket + ".gap" // (a key no session has)
	publish := func(m *nats.Msg, seq uint64) {
		ack, err := js.PublishMsg(ctx, m)
		if err != nil || ack.Sequence != seq {
			t.Fatalf("write %s at %d: %v (%+v)", m.Subject, seq, err, ack)
		}
	}
	for sc.Scan() {
		var v storedValue
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		for ; next < v.Seq; next++ {
			publish(nats.NewMsg(gap), next)
			gaps = append(gaps, next)
		}
		m := nats.NewMsg(v.Subject)
		for k, vs := range v.Header {
			if !strings.HasPrefix(k, "Nats-") {
				m.Header[k] = vs
			}
		}
		m.Data = v.Data
		publish(m, v.Seq)
		next, values = v.Seq+1, values+1
	}
	if err := sc.Err(); err != nil || values == 0 {
		t.Fatalf("read %s: %v (%d values)", path, err, values)
	}
	if len(gaps) > 0 {
		if err := st.Purge(ctx, jetstream.WithPurgeSubject(gap)); err != nil {
			t.Fatal(err)
		}
	}
}
