// Command otelcol-callsheet is the OpenTelemetry Collector that callsheet's
// trace tests send spans to (docs/operations.md, "Traces"): the
// Collector's own OTLP receiver (otlpreceiver) and its file exporter
// (fileexporter, which writes what it received as OTLP JSON, one request a
// line), built from the Collector's released modules (v0.161.0; contrib's
// fileexporter is served at that release) with otelcol.NewCommand, as the
// Collector's builder would make it. scripts/ensure-otelcol builds it into
// .tools/bin; a test starts it with a config naming a port and a file.
//
//	otelcol-callsheet --config file:/path/to/config.yaml
package main

import (
	"log"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{Command: "otelcol-callsheet", Description: "OTLP/HTTP receiver writing OTLP JSON, for callsheet's trace tests", Version: "0.161.0"},
		Factories: func() (otelcol.Factories, error) {
			var f otelcol.Factories
			var err error
			if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
				return f, err
			}
			if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory()); err != nil {
				return f, err
			}
			f.Telemetry = otelconftelemetry.NewFactory()
			return f, nil
		},
		ConfigProviderSettings: otelcol.ConfigProviderSettings{ResolverSettings: confmap.ResolverSettings{
			ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
			DefaultScheme:     "file",
		}},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatal(err)
	}
}
