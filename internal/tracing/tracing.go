// Package tracing exports the operator's own traces (its reconciles, the
// relay's sessions) over OTLP/gRPC when the standard OpenTelemetry
// environment names a collector, and costs nothing otherwise: without one
// no provider is installed and callers skip their spans (Enabled). The
// OpenTelemetry Go SDK's exporter reads the standard variables itself:
// OTEL_EXPORTER_OTLP_ENDPOINT (or _TRACES_ENDPOINT), _CERTIFICATE for a
// private CA (a ConfigMap the Subscription mounts), _HEADERS, _INSECURE;
// OTEL_SERVICE_NAME overrides the service name.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Name is the instrumentation scope of the operator's spans.
const Name = "github.com/openshell/openshell-operator"

var enabled atomic.Bool

// Enabled says whether Start installed an exporter: spans are worth
// starting.
func Enabled() bool { return enabled.Load() }

// Configured says whether the environment names a collector.
func Configured(getenv func(string) string) bool {
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Start installs, when the environment names a collector, a tracer
// provider that batches spans to it as service (service.name, unless
// OTEL_SERVICE_NAME says otherwise), and returns what flushes and
// uninstalls it. Without a collector it installs nothing.
func Start(ctx context.Context, service string) (func(context.Context) error, error) {
	if !Configured(os.Getenv) {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("create the OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(service)))
	if err != nil {
		return nil, fmt.Errorf("describe the service: %w", err)
	}
	if env, err := resource.New(ctx, resource.WithFromEnv()); err == nil {
		if merged, err := resource.Merge(res, env); err == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	enabled.Store(true)
	return func(ctx context.Context) error {
		enabled.Store(false)
		otel.SetTracerProvider(noop.NewTracerProvider())
		return errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx))
	}, nil
}

// Tracer is the operator's tracer.
func Tracer() trace.Tracer { return otel.Tracer(Name) }
