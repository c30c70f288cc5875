// Package testmodel holds the models that goddp's module-wide suites
// train, for tests only: the branch model, whose two heads of one shape
// make Gorgonia share their gradients' memory and whose heads can leave
// parameters unreached, and the plain references its suites check DDP
// against (each rank's gradients by Gorgonia alone, averaged over ranks).
// The suites under tests/ (replicas, combo, torch, gpu) import it; the
// root's own tests keep their MLP in package ddp.
//
// Nothing here is API: names change with the suites. It has no Example,
// being for tests only; tests/replicas exercises all of it.
package testmodel
