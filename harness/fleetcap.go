package harness

import "github.com/callsheet/callsheet/tool"

// setFleetCap carries a registration's fleet-wide cap to its tool
// (docs/spec.md §7, "Fleet-wide caps"): the pool holds a call of it until
// a slot of the cap is free, before the task is offered to any worker.
// The registry checks the cap's range and scope (tool.RuleFleetCap).
func setFleetCap(t *tool.Tool, s Spec) {
	t.FleetCap, t.FleetCapScope = s.FleetCap, s.FleetCapScope
}

// capsSupported reports whether this build enforces fleet_cap.
const capsSupported = true
