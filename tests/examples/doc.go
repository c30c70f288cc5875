// Package examples holds no code: its tests check that every program under
// examples/ is one a user can copy. Each example is copied out of the
// module into a module of its own (module example.com/copy, requiring
// github.com/goddp/ddp through a replace directive that points at this
// checkout, as a user's program would until the module is published),
// built without the network from the module cache, and run in its quick
// mode. An example that imports internal/ fails there: the go tool refuses
// "use of internal package ... not allowed" outside the module.
//
// The tests also hold the engine line for users: a GoMLX program built the
// documented way (examples/gomlx, joining through dist and launching
// through launch) links no Gorgonia, and dist and launch link no engine.
//
//	go test ./tests/examples
package examples
