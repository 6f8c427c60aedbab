// Package hooks runs code around tool calls (docs/spec.md §2.1, issue "hooks and
// middleware"): before-tool hooks, whose failure fails the whole turn;
// middleware, which can deny a call recoverably (blocked/denied) or rewrite
// its arguments (validated again); and after-tool hooks, which see each
// result. Go programs pass functions; config-level hooks are external
// commands adapted by Command* below.
package hooks
