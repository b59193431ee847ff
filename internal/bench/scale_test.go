package bench

import (
	"context"
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
	rep, err := RunScale(context.Background(), ScaleOptions{Runtimes: []int{1, 8}, AppendFor: 300 * time.Millisecond,
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
	if len(rep.Sizing) != 3 || len(rep.Goals) < 5 {
		t.Fatalf("sizing %+v goals %+v", rep.Sizing, rep.Goals)
	}
	if md := rep.Markdown(); len(md) < 1000 {
		t.Fatalf("report:\n%s", md)
	}
}
