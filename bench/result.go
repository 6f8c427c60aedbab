package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Better says which way a row improves.
type Better string

// Directions of improvement.
const (
	Lower  Better = "lower"
	Higher Better = "higher"
)

// Row is one line of the report: the median of a measurement over the runs.
// Floor and Ratio are nil for rows without a floor.
type Row struct {
	Name       string   `json:"name"`
	Value      float64  `json:"value"`
	Unit       string   `json:"unit"`
	Floor      *float64 `json:"floor"`
	Ratio      *float64 `json:"ratio"`
	Better     Better   `json:"better"`
	Conditions string   `json:"conditions"`
}

// sample is one measurement of a row in one run.
type sample struct {
	name       string
	value      float64
	unit       string
	better     Better
	floor      float64 // 0: no floor
	conditions string
}

// aggregate turns samples into rows, in the order names first appear: the
// value and the floor are medians of their own, the ratio is theirs, and
// the conditions note how far the runs spread.
func aggregate(samples []sample) []Row {
	var order []string
	by := map[string][]sample{}
	for _, s := range samples {
		if _, ok := by[s.name]; !ok {
			order = append(order, s.name)
		}
		by[s.name] = append(by[s.name], s)
	}
	rows := make([]Row, 0, len(order))
	for _, name := range order {
		ss := by[name]
		vals, floors := make([]float64, len(ss)), []float64{}
		for i, s := range ss {
			vals[i] = s.value
			if s.floor > 0 {
				floors = append(floors, s.floor)
			}
		}
		last := ss[len(ss)-1]
		r := Row{Name: name, Value: median(vals), Unit: last.unit, Better: last.better, Conditions: last.conditions}
		if len(ss) > 1 {
			lo, hi := slices.Min(vals), slices.Max(vals)
			if r.Value != 0 {
				r.Conditions += fmt.Sprintf("; %d samples, spread %.0f%%", len(ss), 100*(hi-lo)/math.Abs(r.Value))
			}
		}
		if len(floors) > 0 {
			f := median(floors)
			ratio := r.Value / f
			r.Floor, r.Ratio = &f, &ratio
		}
		rows = append(rows, r)
	}
	return rows
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// percentile returns the p-th percentile (0..100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// format prints a value with 3 significant digits, without exponent.
func format(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// formatRatio prints a ratio with 2 decimals, or 3 under 0.1, where the
// peer's ratios fall (0.028×) and 2 decimals would round them together.
func formatRatio(v float64) string {
	if math.Abs(v) < 0.1 {
		return strconv.FormatFloat(v, 'f', 3, 64) + "×"
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "×"
}

// Column widths of the table: rows are printed as they are measured, so
// the columns cannot be sized to the widest value.
const (
	nameWidth  = 40
	valueWidth = 10
	unitWidth  = 6
	floorWidth = 10
	ratioWidth = 8
)

// writeHeader prints the table's column names.
func writeHeader(w io.Writer) error {
	_, err := fmt.Fprintf(w, "%-*s %*s %-*s %-8s %*s %*s  %s\n", nameWidth, "name", valueWidth, "value", unitWidth, "unit", "better", floorWidth, "floor", ratioWidth, "ratio", "conditions")
	return err
}

// writeTable prints rows as lines of the table.
func writeTable(w io.Writer, rows []Row) error {
	for _, r := range rows {
		floor, ratio := "-", "-"
		if r.Floor != nil {
			floor, ratio = format(*r.Floor), formatRatio(*r.Ratio)
		}
		arrow := "↓ lower"
		if r.Better == Higher {
			arrow = "↑ higher"
		}
		// %-8s pads by bytes; the arrows are 3 bytes for one column.
		if _, err := fmt.Fprintf(w, "%-*s %*s %-*s %-10s %*s %*s  %s\n", nameWidth, r.Name, valueWidth, format(r.Value), unitWidth, r.Unit, arrow, floorWidth, floor, ratioWidth, ratio, strings.ReplaceAll(r.Conditions, "\t", " ")); err != nil {
			return err
		}
	}
	return nil
}

func writeJSON(w io.Writer, rows []Row) error {
	enc := json.NewEncoder(w)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
