package decl

// Effect says what a call does to the world. Empty is undeclared, which
// counts as EffectSideEffecting (OrStrictest).
type Effect string

// The four effects of docs/spec.md §1.
const (
	EffectReadOnly      Effect = "read_only"
	EffectUserMediated  Effect = "user_mediated"
	EffectDelegating    Effect = "delegating"
	EffectSideEffecting Effect = "side_effecting"
)

// Effects lists every effect, in the order docs/spec.md gives them.
func Effects() []Effect {
	return []Effect{EffectReadOnly, EffectUserMediated, EffectDelegating, EffectSideEffecting}
}

// Valid reports whether e is one of Effects.
func (e Effect) Valid() bool { return oneOf(e, Effects()) }

// OrStrictest is e, or EffectSideEffecting when e is empty: an undeclared
// effect fails closed.
func (e Effect) OrStrictest() Effect {
	if e == "" {
		return EffectSideEffecting
	}
	return e
}

// Replay says whether a call may be tried again after a failure. Empty is
// undeclared, which counts as ReplayNever.
type Replay string

// ReplayNever (at most once) is the default; ReplaySafe calls may be
// retried after backoff.
const (
	ReplayNever Replay = "never"
	ReplaySafe  Replay = "safe"
)

// Replays lists every replay policy.
func Replays() []Replay { return []Replay{ReplayNever, ReplaySafe} }

// Valid reports whether r is one of Replays.
func (r Replay) Valid() bool { return oneOf(r, Replays()) }

// OrStrictest is r, or ReplayNever when r is empty.
func (r Replay) OrStrictest() Replay {
	if r == "" {
		return ReplayNever
	}
	return r
}

// Class is a call's concurrency class: whether it may overlap other calls
// of its turn, and which of a node's tool actors runs it. Empty is
// undeclared, which counts as ClassExclusive.
type Class string

// ClassExclusive (the default) is a two-way barrier; ClassParallelSafe
// calls overlap each other up to the session's cap; ClassIsolatedBackground
// calls run off the foreground path and answer with a job handle.
const (
	ClassExclusive          Class = "exclusive"
	ClassParallelSafe       Class = "parallel_safe"
	ClassIsolatedBackground Class = "isolated_background"
)

// Classes lists every concurrency class.
func Classes() []Class {
	return []Class{ClassExclusive, ClassParallelSafe, ClassIsolatedBackground}
}

// Valid reports whether c is one of Classes.
func (c Class) Valid() bool { return oneOf(c, Classes()) }

// OrStrictest is c, or ClassExclusive when c is empty: "empty means
// exclusive" is decided here and nowhere else.
func (c Class) OrStrictest() Class {
	if c == "" {
		return ClassExclusive
	}
	return c
}

// Names returns the values of a list as strings, for messages and for the
// config's checks.
func Names[T ~string](vs []T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func oneOf[T comparable](v T, vs []T) bool {
	for _, x := range vs {
		if v == x {
			return true
		}
	}
	return false
}
