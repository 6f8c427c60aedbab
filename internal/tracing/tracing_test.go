package tracing

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/trace/noop"
)

func env(kv map[string]string) Env { return func(k string) string { return kv[k] } }

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		on       bool
		where    string
		wantErr  string
		errorsIs error
	}{
		{name: "no variables: off", env: nil},
		{name: "service name alone: off", env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{name: "endpoint: on", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318/"}, on: true, where: "http://127.0.0.1:4318/v1/traces"},
		{name: "traces endpoint as given", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:2/t"}, on: true, where: "http://b:2/t"},
		{name: "otlp exporter named: the default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true, where: "http://localhost:4318/v1/traces"},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}},
		{name: "exporter none wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1"}},
		{name: "another exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, errorsIs: ErrConfig,
			wantErr: `tracing: OTEL_* environment: OTEL_TRACES_EXPORTER="zipkin": callsheet exports traces over OTLP only: set it to otlp or none, or unset it`},
		{name: "grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, errorsIs: ErrConfig,
			wantErr: `tracing: OTEL_* environment: OTEL_EXPORTER_OTLP_PROTOCOL="grpc": callsheet exports traces over OTLP/HTTP with protobuf: set it to http/protobuf, or unset it`},
		{name: "the traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, on: true, where: "http://a:1/v1/traces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := FromEnv(context.Background(), env(tc.env), "v", "n1")
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, tc.errorsIs) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			if p.Enabled() != tc.on {
				t.Fatalf("Enabled()=%v, want %v", p.Enabled(), tc.on)
			}
			if !tc.on {
				if _, ok := p.TracerProvider.(noop.TracerProvider); !ok || p.Node() != nil {
					t.Fatalf("off, but the provider is %T and Node() %v: want a no-op one and nil", p.TracerProvider, p.Node())
				}
				return
			}
			if p.Where() != tc.where || p.Node() == nil {
				t.Fatalf("Where()=%q Node()=%v, want %q and the provider", p.Where(), p.Node(), tc.where)
			}
		})
	}
}
