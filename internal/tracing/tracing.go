// Package tracing sets up the node's OpenTelemetry tracer provider from the
// standard OTEL_* environment variables (docs/spec.md §8, docs/operations.md
// "Traces"): spans go over OTLP/HTTP (protobuf) to the endpoint they name,
// batched, and nothing at all is set up without one (a no-op tracer). The
// exporter reads its own variables (endpoint, headers, timeout,
// compression, certificates), the SDK the sampler's and the batcher's, the
// resource OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// DefaultServiceName is service.name unless OTEL_SERVICE_NAME (or
// OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const DefaultServiceName = "callsheet-node"

// ErrConfig is wrapped by every error about the OTEL_* variables.
var ErrConfig = errors.New("tracing: OTEL_* environment")

// Provider is the node's tracer provider: the SDK's, exporting over
// OTLP/HTTP, when the environment asks for traces, else a no-op one. Its
// owner calls Shutdown once the node is closed, which flushes the batcher.
// Safe for concurrent use.
type Provider struct {
	trace.TracerProvider
	sdk      *sdktrace.TracerProvider
	endpoint string
}

// Env is how FromEnv reads a variable; os.Getenv in production.
type Env func(string) string

// FromEnv returns the provider the environment asks for. Traces are on when
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT is set,
// or OTEL_TRACES_EXPORTER is otlp (then to the OTLP default,
// http://localhost:4318); off, with a no-op tracer, otherwise and whenever
// OTEL_SDK_DISABLED is true or OTEL_TRACES_EXPORTER is none. It fails
// (ErrConfig) for an exporter other than otlp or none, or a protocol other
// than http/protobuf, naming the variable and its value; the exporter's
// own variables are checked by the exporter. The batcher's goroutine
// starts here. Attributes of the resource: service.name (DefaultServiceName
// unless the environment names one), service.version, service.instance.id
// (instance, the node's name).
func FromEnv(ctx context.Context, getenv Env, version, instance string) (*Provider, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if on, err := wanted(getenv); err != nil || !on {
		return &Provider{TracerProvider: noop.NewTracerProvider()}, err
	}
	// The exporter reads the process's environment itself; getenv only
	// decides whether there is one.
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: the OTLP/HTTP exporter: %v", ErrConfig, err)
	}
	attrs := []resource.Option{resource.WithAttributes(semconv.ServiceName(DefaultServiceName))}
	if version != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceVersion(version)))
	}
	if instance != "" {
		attrs = append(attrs, resource.WithAttributes(semconv.ServiceInstanceID(instance)))
	}
	// Later options win: the environment's names over the defaults.
	res, err := resource.New(ctx, append(attrs, resource.WithTelemetrySDK(), resource.WithFromEnv())...)
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("%w: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %v", ErrConfig, err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &Provider{TracerProvider: tp, sdk: tp, endpoint: Endpoint(getenv)}, nil
}

// wanted reads the variables that switch traces on or off.
func wanted(getenv Env) (bool, error) {
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); strings.EqualFold(v, "true") {
		return false, nil
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")))
	switch exporter {
	case "none":
		return false, nil
	case "", "otlp":
	default:
		return false, fmt.Errorf("%w: OTEL_TRACES_EXPORTER=%q: callsheet exports traces over OTLP only: set it to otlp or none, or unset it", ErrConfig, exporter)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(k)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%w: %s=%q: callsheet exports traces over OTLP/HTTP with protobuf: set it to http/protobuf, or unset it", ErrConfig, k, p)
			}
			break // the signal's own variable wins
		}
	}
	return exporter == "otlp" || Endpoint(getenv) != "", nil
}

// Endpoint is where spans go as the environment says: the traces endpoint
// as given, or the general one with /v1/traces; "" when neither is set.
func Endpoint(getenv Env) string {
	if e := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")); e != "" {
		return e
	}
	if e := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT")); e != "" {
		return strings.TrimRight(e, "/") + "/v1/traces"
	}
	return ""
}

// Node is the provider to give node.Options.TracerProvider: p, or nil
// when no span is exported (the node then makes none at all).
func (p *Provider) Node() trace.TracerProvider {
	if !p.Enabled() {
		return nil
	}
	return p
}

// Enabled reports whether spans are exported (false: a no-op tracer).
func (p *Provider) Enabled() bool { return p != nil && p.sdk != nil }

// Where says where spans go, for the start-up log: the endpoint, or
// http://localhost:4318/v1/traces, the OTLP default.
func (p *Provider) Where() string {
	if p.endpoint == "" {
		return "http://localhost:4318/v1/traces"
	}
	return p.endpoint
}

// Shutdown flushes the spans the batcher holds (within ctx) and stops its
// goroutine and the exporter. Safe to call on a no-op provider, and more
// than once.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.sdk == nil {
		return nil
	}
	return p.sdk.Shutdown(ctx)
}
