package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// streamGap is how far apart the model completes the calls of the streamed
// turn benchmark.
const streamGap = 50 * time.Millisecond

// benchStream times a turn of 8 parallel-safe calls (each sleeping 100 ms)
// that the model completes 50 ms apart, from the first call's completion
// to its result committed (the recorded time of its ResultCommitted, read from the followed log) and
// to the turn's answer: streamed (each call posted to .../calls as it
// completes, the end after the last) against posted whole once the last
// call is complete, which is the floor row of the same run, so the ratio
// is streamed over posted.
func benchStream(ctx context.Context, s *suite, durability string) ([]sample, error) {
	r, err := startNode(ctx, durability)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.prepare(ctx, 1); err != nil {
		return nil, err
	}
	session := r.sessions[0]
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	evs, err := r.n.Events(wctx, tenant, session, 0, true)
	if err != nil {
		return nil, err
	}
	// firsts hands over when each turn's first result was recorded.
	type first struct {
		turn string
		at   time.Time
	}
	firsts := make(chan first, 16)
	go func() {
		for ev := range evs {
			if ev.Type != events.TypeResultCommitted {
				continue
			}
			var rc events.ResultCommitted
			if err := events.DecodeInto(ev, &rc); err == nil && rc.Index == 0 {
				firsts <- first{rc.Turn, ev.Time}
			}
		}
	}()
	seq := 0
	// turn runs one turn and answers the time from the first call's
	// completion to its result, and to the turn's answer.
	turn := func(streamed bool) (first, whole time.Duration, err error) {
		seq++
		id := fmt.Sprintf("t%d", seq)
		calls := make([]events.CallSpec, scheduleCalls)
		for i := range calls {
			calls[i] = events.CallSpec{ID: "c" + strconv.Itoa(i), Name: toolNap, Arguments: json.RawMessage(`{}`)}
		}
		start := time.Now()
		var t interface{ ok() error }
		if streamed {
			for i := range calls {
				time.Sleep(time.Until(start.Add(time.Duration(i) * streamGap)))
				if _, err := r.n.AddCalls(ctx, tenant, session, id, calls[i:i+1], node.BatchOptions{From: i}); err != nil {
					return 0, 0, err
				}
			}
			got, err := r.n.EndTurn(ctx, tenant, session, id, len(calls), true)
			if err != nil {
				return 0, 0, err
			}
			t = answered(got.Results)
		} else {
			time.Sleep(time.Until(start.Add(time.Duration(len(calls)-1) * streamGap)))
			got, err := r.n.SubmitTurn(ctx, tenant, session, id, calls, true)
			if err != nil {
				return 0, 0, err
			}
			t = answered(got.Results)
		}
		whole = time.Since(start)
		if err := t.ok(); err != nil {
			return 0, 0, err
		}
		for {
			select {
			case got := <-firsts:
				if got.turn != id {
					continue
				}
				return got.at.Sub(start), whole, nil
			case <-time.After(10 * time.Second):
				return 0, 0, fmt.Errorf("turn %s: no result of its first call in the log after 10 s", id)
			}
		}
	}
	// A warm-up of each, then the two alternate.
	if _, _, err := turn(true); err != nil {
		return nil, err
	}
	if _, _, err := turn(false); err != nil {
		return nil, err
	}
	cond := fmt.Sprintf("%s, a turn of %d parallel-safe calls sleeping %s each that the model completes %s apart: streamed (each call posted as it completes, then the end) vs posted whole after the last; floor: posted, in the same run",
		durability, scheduleCalls, napTime, streamGap)
	var out []sample
	for range s.cfg.ScheduleTurns {
		sf, sw, err := turn(true)
		if err != nil {
			return nil, err
		}
		pf, pw, err := turn(false)
		if err != nil {
			return nil, err
		}
		out = append(out,
			sample{name: "stream/" + durability + "/first-result", value: ms(sf), floor: ms(pf), unit: "ms", better: Lower,
				conditions: cond + "; time from the first call's completion to its result in the log"},
			sample{name: "stream/" + durability + "/turn", value: ms(sw), floor: ms(pw), unit: "ms", better: Lower,
				conditions: cond + "; time from the first call's completion to the turn's answer"},
		)
	}
	return out, nil
}

// answered checks every result of a nap turn is ok.
type answered []events.Result

func (a answered) ok() error {
	for _, res := range a {
		if res.Outcome != events.OutcomeOK {
			return fmt.Errorf("nap call %s: %s %v", res.ID, res.Outcome, res.Content)
		}
	}
	return nil
}
