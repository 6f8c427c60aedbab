package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/callsheet/callsheet/events"
)

// scheduleCalls is the size of the turn schedule times.
const scheduleCalls = 8

// benchSchedule times turns of 8 parallel-safe calls that each sleep 100 ms:
// a perfect schedule runs them all at once and answers in 100 ms, so wall
// time minus 100 ms is what scheduling and recording the turn cost.
func benchSchedule(ctx context.Context, s *suite, durability string) ([]sample, error) {
	r, err := startNode(ctx, durability)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.prepare(ctx, 1); err != nil {
		return nil, err
	}
	calls := make([]events.CallSpec, scheduleCalls)
	for i := range calls {
		calls[i] = events.CallSpec{ID: "c" + strconv.Itoa(i), Name: toolNap, Arguments: json.RawMessage(`{}`)}
	}
	turn := func() (time.Duration, error) {
		start := time.Now()
		t, err := r.n.SubmitTurn(ctx, tenant, r.sessions[0], "", calls, true)
		took := time.Since(start)
		if err != nil {
			return 0, err
		}
		for _, res := range t.Results {
			if res.Outcome != events.OutcomeOK {
				return 0, fmt.Errorf("nap call %s: %s %v", res.ID, res.Outcome, res.Content)
			}
		}
		return took, nil
	}
	if _, err := turn(); err != nil { // warm-up
		return nil, err
	}
	var out []sample
	cond := fmt.Sprintf("%s, one turn of %d parallel-safe calls sleeping %s each (cap %d), wall time of SubmitTurn(wait) minus %s; target ≤ 5 ms",
		durability, scheduleCalls, napTime, scheduleCalls, napTime)
	for range s.cfg.ScheduleTurns {
		took, err := turn()
		if err != nil {
			return nil, err
		}
		out = append(out, sample{name: "schedule/" + durability + "/overhead", value: ms(took - napTime), unit: "ms", better: Lower, conditions: cond})
	}
	return out, nil
}
