// Command bench measures callsheet against the floor its dependencies set and
// prints one table (or JSON lines) of the results.
//
// Every row is the median of several runs (-runs, default 5). A row's floor
// is what the same work costs done directly with JetStream on the same
// server settings, and ratio = value / floor; the "better" column says
// whether a lower or a higher value is better. Each benchmark starts its own
// embedded JetStream in a fresh temporary directory (TMPDIR) and connects to
// it in-process, as a node does.
//
// Usage:
//
//	go run ./bench                      # everything, median of 5 runs
//	go run ./bench -quick               # a fast smoke run (1 run, tiny sizes)
//	go run ./bench -only 'latency|write' -runs 3
//	go run ./bench -json                # one JSON object per line
//	go run ./bench -only throughput -cpuprofile cpu.out && go tool pprof -top cpu.out
//	go run ./bench -peers -only peer -runs 3   # callsheet against Temporal
//	go run ./bench -only throughput/interval -sessions 1024   # more sessions than the default levels
//
// The benchmarks (names as -only matches them):
//
//	probe               what one no-op call writes today (events and bytes)
//	latency/direct      the no-op tool's function called in-process
//	latency/{fsync,interval}     one call per turn, one at a time, over the
//	                    node (SubmitTurn → session actor → log → tool actor →
//	                    commit), beside two floors: the docs/facts.md minimal call and
//	                    the same writes as a call done with plain publishes
//	write/{fsync,interval}       one guarded Append against one plain publish
//	throughput/{fsync,interval}  calls/s at 1, 16 and 256 sessions (-sessions), beside
//	                    the same floors with as many publishers
//	schedule/{fsync,interval}    a turn of 8 parallel-safe 100 ms calls:
//	                    wall time minus 100 ms
//	mcp/{fsync,interval}         one call of a real MCP server's tool
//	                    (server-everything's echo over stdio) through the
//	                    node, against the same call made directly with the
//	                    Go SDK in the same run (needs scripts/ensure-mcp-deps)
//	tracing/interval    the interval node's one-call turn p50 and CPU per
//	                    call with traces exported (OTEL_EXPORTER_OTLP_ENDPOINT
//	                    to a real OpenTelemetry Collector process) beside
//	                    the same with traces off, in the same run (needs
//	                    scripts/ensure-otelcol)
//	replay/fold         events/s folded into transcripts (projections.Fold), and µs per call
//	replay/log          read and fold one 100-event session from a log that
//	                    holds 10 k, then 1 M, events of other sessions; warm,
//	                    and cold (-cold: the server restarted before each read)
//	chain/hash          the hash chain's cost per event (events.Hash): a
//	                    no-op call's events (~300 B) and a 50 KB result
//	search              GET /v1/sessions' query (natslog.Search.Find) on an
//	                    index of 20 k sessions, beside the same on 2 k
//	fleet/throughput/fsync  calls/s of 3 in-process nodes, each its own
//	                    clustered embedded server (R3), 16 sessions each,
//	                    beside one node alone with as many sessions
//	fleet/takeover      3 node processes (cmd/callsheet-node, built on demand):
//	                    SIGKILL of a session's owner to its next turn
//	                    served through a survivor, beside the lease TTL
//	memory/session      heap bytes per idle open session
//	memory/call         heap bytes per in-flight call, and per completed turn
//	peer/temporal       with -peers only: the same no-op call through
//	                    Temporal in-process (bench/peers, a module of its
//	                    own, built on demand), beside callsheet's one-call
//	                    turn from the same run, with their ratios
//
// Each benchmark's rows are printed as soon as its runs are done. A benchmark
// that cannot run on this machine (the MCP servers or rg not installed, no
// sandbox) is skipped, and one that fails is reported; the others still run,
// the end of the output lists what was skipped or failed and why (stderr with
// -json), and the command exits 1 when something failed.
//
// The command owns every goroutine it starts: each rig (a node or a floor)
// stops its consumers and waits for its workers in close, before its server
// shuts down.
package main
