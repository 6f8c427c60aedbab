package natslog

import (
	"encoding/json"

	"context"
	"github.com/callsheet/callsheet/projections"
	"slices"
	"strings"
	"time"
)

// Expired returns up to limit of tenant's sessions that the search index
// holds as closed with their last event (the close, or its signature)
// before closedBefore: the retention sweep's candidates (docs/spec.md §7).
// It reads only the days on which sessions opened before closedBefore
// were filed (a session opened later cannot have closed before it), oldest
// first: a day marker listing, then each such day's summaries.
func (x *Search) Expired(ctx context.Context, tenant string, closedBefore time.Time, limit int) ([]string, error) {
	if err := ValidateIDs(tenant, "x"); err != nil {
		return nil, err
	}
	marks, _, err := x.matching(ctx, tenant+".d.*")
	if err != nil {
		return nil, err
	}
	var days []string
	for _, k := range marks {
		d := k[strings.LastIndexByte(k, '.')+1:]
		if t := dayTime(d); !t.IsZero() && !t.After(closedBefore) {
			days = append(days, d)
		}
	}
	slices.Sort(days)
	var out []string
	for _, d := range days {
		keys, vals, err := x.matching(ctx, tenant+".s."+d+".*")
		if err != nil {
			return nil, err
		}
		ids := make([]string, 0, len(keys))
		for _, k := range keys {
			ids = append(ids, k[strings.LastIndexByte(k, '.')+1:])
		}
		slices.Sort(ids)
		var sums = map[string]bool{}
		if vals != nil {
			for k, v := range vals {
				if s, ok := summaryOf(v); ok && s.Closed && s.Last.Before(closedBefore) {
					sums[k[strings.LastIndexByte(k, '.')+1:]] = true
				}
			}
		} else {
			all, err := x.summaries(ctx, tenant, d, ids)
			if err != nil {
				return nil, err
			}
			for id, s := range all {
				if s.Closed && s.Last.Before(closedBefore) {
					sums[id] = true
				}
			}
		}
		for _, id := range ids {
			if sums[id] {
				if out = append(out, id); len(out) >= limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// summaryOf decodes a stored summary.
func summaryOf(v []byte) (*projections.Summary, bool) {
	var s projections.Summary
	if json.Unmarshal(v, &s) != nil {
		return nil, false
	}
	return &s, true
}
