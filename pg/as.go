package pg

import "reflect"

// Note [wrappers keep abilities]
//
// Groups get wrapped: pg/desync checks and diagnoses collectives,
// pg/instrument measures them, the reducer counts the bytes a comm hook
// sends. A wrapper that embeds the group it wraps has only the methods
// it declares, so a type assertion on it for an optional ability
// (PointToPoint, Splitter, ...) fails even when the group inside has it,
// and a hook that needs the ability breaks as soon as the wrapper is
// added. As http.ResponseController finds Flush behind wrapping
// ResponseWriters, As finds an ability behind wrappers, and every caller
// looks for abilities through it, never by type assertion.
//
// The rules for a wrapper:
//
//  1. It has Inner() ProcessGroup, returning what it wraps (a [Wrapper]).
//  2. An ability it does not implement is found by As on the group
//     inside, and calls through that ability bypass the wrapper. That is
//     right for what the wrapper has no business seeing (a device-bucket
//     allocator, completion hooks), and wrong for a wrapper whose job is
//     to see every call of that kind: a counter of bytes, a checker of
//     collectives.
//  3. Such a wrapper sees the calls itself, in one of two ways. It
//     implements the ability, forwarding to what As finds inside it
//     (pg/desync's Group does, for all of Extended; it then claims the
//     ability even over a group without it, and fails those calls with
//     ErrUnsupported). Or it has an As(target any) bool method, which
//     As consults, that hands out a forwarding view of the ability only
//     when the group inside has it (pg/instrument's Counter). The second
//     way never claims an ability the group lacks.

// Wrapper is implemented by process groups that wrap another: pg/desync,
// pg/instrument and the reducer's view of a comm hook's group. As
// follows Inner through any chain of wrappers.
type Wrapper interface {
	// Inner is the wrapped group.
	Inner() ProcessGroup
}

// maxWrapDepth bounds As's walk, against a wrapper that wraps itself.
const maxWrapDepth = 64

// As finds the first group in g's chain of wrappers (g, then g's Inner,
// and so on; see [Wrapper]) that implements the interface target points
// to, sets *target to it and returns true; it returns false if none
// does. A group with an As(target any) bool method is asked too, after
// the type check and before its Inner: a wrapper uses it to hand out a
// view of an ability that still passes through it. See Note [wrappers
// keep abilities].
//
//	var p2p pg.PointToPoint
//	if pg.As(g, &p2p) { w := p2p.Send(ctx, t, peer, tag) }
//
// As panics if target is not a non-nil pointer, as errors.As does.
func As(g ProcessGroup, target any) bool {
	if target == nil {
		panic("pg: As target is nil")
	}
	val := reflect.ValueOf(target)
	if val.Kind() != reflect.Pointer || val.IsNil() {
		panic("pg: As target must be a non-nil pointer")
	}
	want := val.Type().Elem()
	for range maxWrapDepth {
		if g == nil {
			return false
		}
		if reflect.TypeOf(g).AssignableTo(want) {
			val.Elem().Set(reflect.ValueOf(g))
			return true
		}
		if x, ok := g.(interface{ As(any) bool }); ok && x.As(target) {
			return true
		}
		w, ok := g.(Wrapper)
		if !ok {
			return false
		}
		g = w.Inner()
	}
	return false
}
