// Package permission decides, as pure code, whether a valid call may run:
// allow, ask (a person approves it first) or deny (docs/spec.md §6, §9). It holds
// the rule matcher, the strict-mode defaults by effect, escalation, and the
// session grants that an "allow for the session" approval leaves behind.
//
// The decision order, first to last (docs/permissions.md has the table):
//
//  1. plan mode: a tool that is not read-only is denied;
//  2. rules: the global rules, then the agent's own; the LAST rule that
//     matches the tool name and its subject (a shell command, a path, a URL)
//     decides allow, ask or deny;
//  3. no rule matched: strict mode asks for side-effecting tools (and every
//     tool whose declarations are unknown, which are side-effecting by
//     default) and allows read-only, user-mediated and delegating ones;
//     without strict mode everything is allowed;
//  4. an ask that a session grant covers becomes an allow;
//  5. escalation: a call with "escalate": true never runs on an automatic
//     allow: it is asked, and a grant never covers it. Only one escalated
//     call is admitted per turn; a second in the same turn is denied.
package permission
