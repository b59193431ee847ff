package kvstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ProvisionOptions says how to lay out the store.
type ProvisionOptions struct {
	// Replicas of every bucket and stream (1 or 3 on a cluster).
	Replicas int
	// Shards is the number of shards of a new store (0: as many as
	// Replicas, so that a 3-node cluster has a leader on each node). A
	// store keeps the count it was made with: another one is refused.
	Shards int
}

// layout is the store's layout, kept under the meta bucket's key "layout".
type layout struct {
	Version int `json:"version"`
	Shards  int `json:"shards"`
}

const layoutKey = "layout"

func readLayout(ctx context.Context, meta jetstream.KeyValue) (layout, error) {
	e, err := meta.Get(ctx, layoutKey)
	if err != nil {
		if isNotFound(err) {
			return layout{}, fmt.Errorf("the session store has no layout in bucket %s (provision it: compactor provision)", MetaBucket)
		}
		return layout{}, unavailable(ctx, "read the store's layout", err)
	}
	var l layout
	if err := json.Unmarshal(e.Value(), &l); err != nil || l.Shards < 1 {
		return layout{}, fmt.Errorf("the store's layout %q does not decode", e.Value())
	}
	if l.Version != LayoutVersion {
		return layout{}, fmt.Errorf("the store's layout is version %d; this build reads version %d", l.Version, LayoutVersion)
	}
	return l, nil
}

// Provision creates what is missing of the store (the meta bucket and its
// layout, each shard's records bucket and data stream, the breakers
// bucket) and updates their replicas (idempotent). It reads first and
// writes only what differs, so a service whose user may only read stream
// info starts against a store an administrator made.
func Provision(ctx context.Context, js jetstream.JetStream, opt ProvisionOptions) error {
	replicas := max(opt.Replicas, 1)
	kvs := func(bucket string) error {
		st, err := js.Stream(ctx, "KV_"+bucket)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
		case err != nil:
			return fmt.Errorf("provision bucket %s: %w", bucket, err)
		case max(st.CachedInfo().Config.Replicas, 1) == replicas:
			return nil
		}
		if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, Replicas: replicas, Storage: jetstream.FileStorage}); err != nil {
			return fmt.Errorf("provision bucket %s: %w", bucket, err)
		}
		return nil
	}
	if err := kvs(MetaBucket); err != nil {
		return err
	}
	meta, err := js.KeyValue(ctx, MetaBucket)
	if err != nil {
		return fmt.Errorf("provision bucket %s: %w", MetaBucket, err)
	}
	lay, err := readLayout(ctx, meta)
	if err != nil {
		want := layout{Version: LayoutVersion, Shards: opt.Shards}
		if want.Shards < 1 {
			want.Shards = replicas
		}
		b, _ := json.Marshal(want)
		if _, cerr := meta.Create(ctx, layoutKey, b); cerr != nil && !errors.Is(cerr, jetstream.ErrKeyExists) {
			return fmt.Errorf("provision the store's layout: %w", cerr)
		}
		if lay, err = readLayout(ctx, meta); err != nil {
			return err
		}
	}
	if opt.Shards > 0 && opt.Shards != lay.Shards {
		return fmt.Errorf("the store has %d shards, not %d: a store keeps the shard count it was made with", lay.Shards, opt.Shards)
	}
	for n := range lay.Shards {
		if err := kvs(RecordsBucket(n)); err != nil {
			return err
		}
		if err := provisionData(ctx, js, n, replicas); err != nil {
			return err
		}
	}
	return kvs(BreakersBucket)
}

// dataConfig is shard n's data stream: per-session subjects, direct gets
// (batched reads by any replica), rollups (the prepared compaction keeps
// only its latest value), a duplicate window for the commit's compaction
// message.
func dataConfig(n, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              DataStream(n),
		Description:       "compactor session data, shard " + strconv.Itoa(n),
		Subjects:          []string{DataSubjectPrefix + strconv.Itoa(n) + ".>"},
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: -1,
		AllowDirect:       true,
		AllowRollup:       true,
		// Upload parts expire (UploadTTL): an upload never used does
		// not stay.
		AllowMsgTTL: true,
		Duplicates:  15 * time.Minute,
		Metadata:    map[string]string{"compactor_layout": strconv.Itoa(LayoutVersion), "compactor_shard": strconv.Itoa(n)},
	}
}

func provisionData(ctx context.Context, js jetstream.JetStream, n, replicas int) error {
	want := dataConfig(n, replicas)
	st, err := js.Stream(ctx, want.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = js.CreateStream(ctx, want)
	case err != nil:
	default:
		have := st.CachedInfo().Config
		if max(have.Replicas, 1) == replicas && have.AllowDirect && have.AllowRollup && have.AllowMsgTTL && slices.Equal(have.Subjects, want.Subjects) {
			return nil
		}
		_, err = js.UpdateStream(ctx, want)
	}
	if err != nil {
		return fmt.Errorf("provision stream %s: %w", want.Name, err)
	}
	return nil
}

// BalanceLeaders moves the leaders of the shards' streams over the
// cluster's nodes, shard n's to the n-th node of those that hold it (a
// stepdown with a preferred leader), so that appends and reads of
// different shards are served by different nodes. The meta leader places
// a new stream's leader where it likes, often all on one node. It returns
// how many leaders it moved; on one server it moves none.
func BalanceLeaders(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (int, error) {
	meta, err := js.KeyValue(ctx, MetaBucket)
	if err != nil {
		return 0, fmt.Errorf("bind bucket %s: %w", MetaBucket, err)
	}
	lay, err := readLayout(ctx, meta)
	if err != nil {
		return 0, err
	}
	moved := 0
	for n := range lay.Shards {
		for i, name := range []string{DataStream(n), "KV_" + RecordsBucket(n)} {
			st, err := js.Stream(ctx, name)
			if err != nil {
				return moved, fmt.Errorf("balance %s: %w", name, err)
			}
			cl := st.CachedInfo().Cluster
			if cl == nil || len(cl.Replicas) == 0 {
				continue
			}
			nodes := []string{cl.Leader}
			for _, r := range cl.Replicas {
				nodes = append(nodes, r.Name)
			}
			slices.Sort(nodes)
			// A shard's two streams on different nodes, too.
			want := nodes[(n+i)%len(nodes)]
			if want == cl.Leader {
				continue
			}
			req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": want}})
			rctx, cancel := withTimeout(ctx)
			reply, err := nc.RequestWithContext(rctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, req)
			cancel()
			if err != nil {
				return moved, fmt.Errorf("balance %s: %w", name, err)
			}
			var resp struct {
				Error *jetstream.APIError `json:"error"`
			}
			if json.Unmarshal(reply.Data, &resp) == nil && resp.Error != nil {
				return moved, fmt.Errorf("balance %s: move its leader to %s: %w", name, want, resp.Error)
			}
			moved++
		}
	}
	return moved, nil
}
