package otlp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/compactor/compactor/internal/telemetry"
	"github.com/compactor/compactor/internal/telemetry/otlp"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestEnabled(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	} {
		if got := otlp.Enabled(env(tt.env)); got != tt.want {
			t.Errorf("Enabled(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

// With an OTLP endpoint in the environment, spans reach it over HTTP
// (protobuf, the default protocol) once flushed; with none, Setup installs
// no provider and nothing is sent anywhere; an unknown protocol is an error.
func TestSetupExportsOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var paths, types []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths, types = append(paths, r.URL.Path), append(types, r.Header.Get("Content-Type"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	ctx := context.Background()

	otel.SetTracerProvider(noop.NewTracerProvider())
	shutdown, err := otlp.Setup(ctx, "v-test", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(noop.TracerProvider); !ok {
		t.Fatalf("with no OTEL_* set, Setup installed %T", otel.GetTracerProvider())
	}
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// The exporters read the OTLP environment themselves.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SERVICE_NAME", "compactor-test")
	shutdown, err = otlp.Setup(ctx, "v-test", os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	_, span := telemetry.Tracer().Start(ctx, "compact_context")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "/v1/traces" || types[0] != "application/x-protobuf" {
		t.Fatalf("collector got %v %v, want one protobuf POST to /v1/traces", paths, types)
	}

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
	if _, err := otlp.Setup(ctx, "v-test", os.Getenv); err == nil {
		t.Fatal("an unknown protocol was accepted")
	}
}
