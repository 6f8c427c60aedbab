// Package crash is the crash suite (issue: at most once under kill -9). Its
// test builds the real cmd/callsheet-node binary with the "faults" build tag, kills it
// with SIGKILL at named points (internal/faults), restarts it on the same
// data dir, and checks the promises of docs/spec.md §3: a never tool ran at most
// once, every call settled, safe tools finished, no committed event was lost
// or duplicated, and the live transcript equals the replayed one.
//
//	go test ./crash                       # 50 randomized trials (CI)
//	go test ./crash -crash.trials=2000    # a long run
//	go test ./crash -crash.seed=42        # replay one sequence of trials
package crash
