package harness

import "github.com/callsheet/callsheet/tool"

// setFleetCap carries a registration's fleet cap to its tool. Until the
// fleet's caps are in this build, a declared cap cannot be enforced, and
// Spec.Check refuses it (capsSupported).
func setFleetCap(t *tool.Tool, s Spec) {}

// capsSupported reports whether this build enforces fleet_cap.
const capsSupported = false
