package natslog_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// BenchmarkAppend measures one Append at a time on one session, in-process
// connection, R1 file store, and reports its median latency (p50-µs).
// Run: go test -run '^$' -bench Append ./events/natslog/
func BenchmarkAppend(b *testing.B) {
	for _, sequential := range []bool{false, true} {
		for _, syncAlways := range []bool{false, true} {
			for _, n := range []int{1, 3} {
				b.Run(fmt.Sprintf("events=%d/sync_always=%v/sequential=%v", n, syncAlways, sequential), func(b *testing.B) {
					e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: b.TempDir(), SyncAlways: syncAlways})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(e.Shutdown)
					l := openLog(b, e, natslog.WithSequentialAppends(sequential))
					ctx := context.Background()
					types := slices.Repeat([]events.Type{events.TypeTurnCompleted}, n)
					var last uint64
					lat := make([]time.Duration, 0, b.N)
					b.ResetTimer()
					for range b.N {
						evs := mk("t", "bench", last, types...)
						start := time.Now()
						if err := l.Append(ctx, "t", "bench", last, evs); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(start))
						last += uint64(n)
					}
					b.StopTimer()
					slices.Sort(lat)
					b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
					b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
				})
			}
		}
	}
}

// BenchmarkAppendAfterPause measures one Append of one event after the
// caller paused (spinning, or asleep so the process's threads go idle),
// and reports its median latency (p50-µs): a call's appends follow such
// pauses (docs/facts.md, "JetStream").
// Run: go test -run '^$' -bench AppendAfterPause ./events/natslog/
func BenchmarkAppendAfterPause(b *testing.B) {
	for _, pause := range []struct {
		name  string
		d     time.Duration
		sleep bool
	}{{"none", 0, false}, {"spin50us", 50 * time.Microsecond, false}, {"sleep300us", 300 * time.Microsecond, true}, {"sleep2ms", 2 * time.Millisecond, true}} {
		b.Run(pause.name, func(b *testing.B) {
			e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(e.Shutdown)
			l := openLog(b, e)
			ctx := context.Background()
			var last uint64
			lat := make([]time.Duration, 0, b.N)
			for b.Loop() {
				evs := mk("t", "bench", last, events.TypeTurnCompleted)
				if pause.sleep {
					time.Sleep(pause.d)
				} else {
					for s := time.Now(); time.Since(s) < pause.d; {
					}
				}
				start := time.Now()
				if err := l.Append(ctx, "t", "bench", last, evs); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				last++
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
