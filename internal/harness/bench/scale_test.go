package bench

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/compactor/compactor/internal/transcript"
)

// A short scale run against a server in this process: every section is
// measured and every goal is judged (met or not: the figures are for
// make scale on a quiet machine; here, that the run works). Appends and
// sweeps must not fail, the store must hold few subjects per message, and
// a sweep with nothing idle must delete nothing.
func TestScaleRunsShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the store under load")
	}
	msgs, err := sessionOf(120)
	if err != nil {
		t.Fatal(err)
	}
	convs := []transcript.Conversation{{Name: "tau-a", Source: "tau-bench", Messages: msgs}, {Name: "tau-b", Source: "tau-bench", Messages: msgs[:80]}}
	rep, err := RunScale(context.Background(), ScaleOptions{Runtimes: []int{1, 8}, AppendFor: 300 * time.Millisecond, Lengths: []int{10, 600},
		Fill: 600, Sweeps: []int{100, 300}, Shards: 2, Compactions: 8, Conversations: convs, EvalLimit: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Appends) != 2 || rep.Appends[1].Appends <= 0 || rep.Appends[1].Floor <= 0 || rep.Appends[1].AppendErrors != 0 {
		t.Fatalf("appends %+v", rep.Appends)
	}
	if rep.PerMsg.Messages != 600 || rep.PerMsg.Subjects <= 0 || rep.PerMsg.Subjects > 0.2 || rep.PerMsg.FloorSubjects != 1 {
		t.Fatalf("per message %+v: a session of 100 messages must be a few subjects", rep.PerMsg)
	}
	if len(rep.Sweeps) != 2 || rep.Sweeps[1].Sessions != 300 || rep.Sweeps[1].SweepMS <= 0 {
		t.Fatalf("sweeps %+v", rep.Sweeps)
	}
	if rep.Compact == nil || rep.Compact.InstantRatio <= 0 {
		t.Fatalf("compactions %+v", rep.Compact)
	}
	// The same replay asks for the same compactions, in process and
	// through the service.
	if ev := rep.Eval; ev == nil || ev.Sessions != 2 || ev.InProcessCompactions < 2 || ev.ServiceCompactions != ev.InProcessCompactions || ev.ServiceS <= 0 {
		t.Fatalf("eval %+v", rep.Eval)
	}
	// Each way of syncing the store measured, always first.
	if len(rep.Durability) != 3 || rep.Durability[0].Sync != "always" || rep.Durability[1].Sync != "1s" {
		t.Fatalf("durability %+v", rep.Durability)
	}
	for _, d := range rep.Durability {
		if d.Appends <= 0 || d.Floor <= 0 {
			t.Fatalf("durability %+v", rep.Durability)
		}
	}
	// Appends through the endpoint on both servers, every runtime count,
	// none failed (a failed append fails the run), the preparer at work
	// on the sessions passing prepare_at; one runtime at each length.
	if len(rep.Endpoint) != 4 || rep.Endpoint[0].Sync != "always" || rep.Endpoint[3].Sync != "1s" {
		t.Fatalf("endpoint %+v", rep.Endpoint)
	}
	for _, e := range rep.Endpoint {
		if e.Below <= 0 || e.Passing <= 0 || e.Floor <= 0 || e.InProcess <= 0 || e.Relay <= 0 || e.RelayRatio <= 0 {
			t.Fatalf("endpoint %+v", rep.Endpoint)
		}
	}
	if len(rep.Lengths) != 2 || rep.Lengths[1].Messages != 600 || rep.Lengths[1].Appends <= 0 {
		t.Fatalf("lengths %+v", rep.Lengths)
	}
	if len(rep.Sizing) != 3 || len(rep.Goals) < 5 {
		t.Fatalf("sizing %+v goals %+v", rep.Sizing, rep.Goals)
	}
	if md := rep.Markdown(); len(md) < 1000 {
		t.Fatalf("report:\n%s", md)
	}
}

// The sizing model adds nodes for what runs out first: with 10 KB a
// message on disk, 10^6 sessions of 10^3 messages (10 TB a replica) need
// 15 nodes of 2 TB, and the limit says disk; an R3 append costs what the
// three-node run measured.
func TestSizingNamesWhatLimits(t *testing.T) {
	rep := &ScaleReport{Shards: 3,
		Appends: []AppendRow{{Runtimes: 64, Appends: 30000, ServerMS: 0.02, ServiceMS: 0.03}},
		PerMsg:  PerMessage{Bytes: 10_000, ServerMemory: 50},
		Sweeps:  []SweepRow{{Sessions: 100000, PerSessionUS: 6}},
		Cluster: &ClusterRow{OneNode: 40000, Replicated: NodesRun{Appends: 20000}}}
	rows, assume := sizing(rep)
	if len(rows) != 3 || !strings.Contains(assume, "2.00x") {
		t.Fatalf("%+v %s", rows, assume)
	}
	big := rows[2]
	if big.Nodes != 15 || big.Limit != "disk" || big.Shards < big.Nodes {
		t.Fatalf("10^6 sessions: %+v", big)
	}
	if want := 66666.67 * 0.02 / 1000 * 2; math.Abs(big.ServerCores-want) > 0.01 {
		t.Fatalf("server cores %.3f, want %.3f", big.ServerCores, want)
	}
	if small := rows[0]; small.Nodes != 3 || !strings.HasPrefix(small.Limit, "none") {
		t.Fatalf("10^4 sessions: %+v", small)
	}
}
