package kvstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/compactor/compactor/internal/session"
)

// multiGetMax is how many subjects one batched direct get may ask for (the
// server answers at most 1,024 per request).
const multiGetMax = 1000

// getMany reads the latest values of keys with batched direct gets
// (multi_last): one request and one streamed answer per 1,000 keys instead
// of a round trip per key. Keys that do not exist, or were deleted, are
// absent from the map. Each request is answered from one isolated read of
// the stream.
func (s *Sessions) getMany(ctx context.Context, keys []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	err := s.eachValue(ctx, keys, func(k string, v []byte) error { out[k] = v; return nil })
	return out, err
}

// eachValue calls fn with each existing key's latest value as it arrives,
// so a long read holds no map of raw values.
func (s *Sessions) eachValue(ctx context.Context, keys []string, fn func(key string, value []byte) error) error {
	for len(keys) > 0 {
		n := min(len(keys), multiGetMax)
		if err := s.multiGet(ctx, keys[:n], fn); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

func (s *Sessions) multiGet(ctx context.Context, keys []string, fn func(key string, value []byte) error) error {
	pending := make(map[string]bool, len(keys))
	subjects := make([]string, 0, len(keys))
	for _, k := range keys {
		if !pending[subject(SessionsBucket, k)] {
			pending[subject(SessionsBucket, k)] = true
			subjects = append(subjects, subject(SessionsBucket, k))
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
			return err
		}
		err = func() error {
			defer sub.Unsubscribe()
			if err := s.nc.PublishRequest("$JS.API.DIRECT.GET.KV_"+SessionsBucket, inbox, req); err != nil {
				return err
			}
			for {
				m, err := sub.NextMsgWithContext(ctx)
				if err != nil {
					return fmt.Errorf("batched get: %w", err)
				}
				switch status := m.Header.Get("Status"); status {
				case "":
				case "204": // end of batch
					return nil
				case "404": // none of the subjects exists
					return nil
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
				if err := fn(subj[prefix:], m.Data); err != nil {
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

// messages reads the messages with seqs, in order, with batched gets.
// A missing message is an error: the record says it exists.
func (s *Sessions) messages(ctx context.Context, sid string, seqs []int64) ([]session.Message, error) {
	keys := make([]string, len(seqs))
	at := make(map[string]int, len(seqs))
	for i, seq := range seqs {
		keys[i] = msgKey(sid, seq)
		at[keys[i]] = i
	}
	out := make([]session.Message, len(seqs))
	got := make([]bool, len(seqs))
	err := s.eachValue(ctx, keys, func(k string, v []byte) error {
		i := at[k]
		if err := json.Unmarshal(v, &out[i]); err != nil {
			return fmt.Errorf("message %d: %w", seqs[i], err)
		}
		got[i] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", sid, err)
	}
	for i, ok := range got {
		if !ok {
			return nil, fmt.Errorf("session %s message %s: %w", sid, strconv.FormatInt(seqs[i], 10), session.ErrNotFound)
		}
	}
	return out, nil
}
