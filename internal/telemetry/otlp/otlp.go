// Package otlp installs OpenTelemetry's SDK from the standard OTEL_*
// environment: the W3C trace-context propagator, and a tracer provider
// that batches spans to an OTLP exporter when the environment asks for it.
// Only the binary's serve command imports it; the service's packages use
// the API alone (package telemetry).
package otlp

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled reports whether the environment asks for traces to be exported:
// OTEL_TRACES_EXPORTER is otlp (or unset) and an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT), and
// OTEL_SDK_DISABLED is not true.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); e != "" && e != "otlp" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Setup installs the W3C trace-context propagator and, when the
// environment asks for it (Enabled), a tracer provider that batches spans
// to an OTLP exporter: over gRPC when OTEL_EXPORTER_OTLP_TRACES_PROTOCOL
// (or OTEL_EXPORTER_OTLP_PROTOCOL) is grpc, else over HTTP (http/protobuf,
// the specification's default). The exporters read the rest of the OTLP
// environment themselves, from the process's environment (endpoint,
// headers, timeout, TLS): getenv is os.Getenv but in tests; the resource
// is service.name compactor and service.version version, which
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override. shutdown
// flushes what is batched; it does nothing when nothing was installed.
func Setup(ctx context.Context, version string, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if !Enabled(getenv) {
		return func(context.Context) error { return nil }, nil
	}
	protocol := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp sdktrace.SpanExporter
	switch strings.ToLower(protocol) {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("telemetry: OTEL_EXPORTER_OTLP_PROTOCOL %q: want grpc or http/protobuf", protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		attribute.String("service.name", "compactor"), attribute.String("service.version", version)))
	if err == nil {
		// The environment wins over the defaults.
		var env *resource.Resource
		if env, err = resource.New(ctx, resource.WithFromEnv()); err == nil {
			res, err = resource.Merge(res, env)
		}
	}
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}
