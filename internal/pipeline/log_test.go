package pipeline_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/compactor/compactor/internal/pipeline"
)

// The pipeline logs at debug level only: the drivers log each result
// (LogResult), completed at info, failed at warn.
func TestPipelineLogsAtDebugOnly(t *testing.T) {
	var buf strings.Builder
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e, rec := newRecorderEnv(t, pipeline.DefaultConfig())
	svc, err := pipeline.New(e.store, e.breakers, rec, pipeline.DefaultConfig(), pipeline.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	e.importSession(t, "s", 3000, chat(30))
	ctx := context.Background()
	done, err := svc.Compact(ctx, pipeline.Request{ID: "r1", SessionID: "s", Trigger: pipeline.TriggerOverBudget})
	if err != nil {
		t.Fatal(err)
	}
	failed, err := svc.Compact(ctx, pipeline.Request{ID: "r2", SessionID: "missing", Trigger: pipeline.TriggerOverBudget})
	if err == nil {
		t.Fatal("a missing session compacted")
	}
	if buf.Len() != 0 {
		t.Fatalf("the pipeline logged above debug:\n%s", buf.String())
	}
	pipeline.LogResult(ctx, log, done)
	pipeline.LogResult(ctx, log, failed)
	if l := buf.String(); !strings.Contains(l, `level=INFO msg="compaction completed" session_id=s request_id=r1 outcome=compacted`) ||
		!strings.Contains(l, `level=WARN msg="compaction failed" session_id=missing request_id=r2 reason=session_not_found`) {
		t.Fatalf("LogResult:\n%s", l)
	}
}
