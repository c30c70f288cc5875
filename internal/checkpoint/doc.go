// Package checkpoint saves and restores everything a training run needs
// to continue exactly: the step, the parameters, the optimizer's state,
// and any extra state (a comm hook's, say), as .npy files and a JSON
// manifest, replaced atomically.
//
//	// rank 0, after the optimizer's Step of training step s (counting from 1):
//	err := checkpoint.Save(dir, checkpoint.Capture(s, params, opt))
//
//	// on resume, every rank, before reducer.Wrap:
//	c, err := checkpoint.Load(dir)
//	err = c.Restore(params, opt) // errors.Is(err, checkpoint.ErrIncompatible): exit 2
//	// continue with step c.Step+1; the sampler's position follows from c.Step
//
// # Layout
//
//	dir/manifest.json          format, step, dtype, names, shapes, files, meta
//	dir/params/<name>.npy      one per parameter, with its shape if known (float64)
//	dir/optimizer/<k>.npy      one per optimizer buffer, a vector (float64)
//	dir/extra/<k>.npy          one per Extra entry, a vector (float64)
//
// Everything is stored as float64, which holds float32 values exactly, so
// a float32 run resumes bit for bit too. When the checkpoint records the
// shapes (Capture does), dir/params can be given to model.Params.LoadNPY
// (--init) as it is.
//
// # Atomicity
//
// Save writes into a fresh temporary directory beside dir, syncs every
// file and the directory, and then swaps it in for dir in one step
// (atomicdir.Write), removing the old one after. A failure or a crash at
// any point leaves dir holding the previous checkpoint, whole; the next
// Save removes a crashed one's leftovers. One process saves to a given dir
// at a time.
//
// Load reads only into typed structures and checks everything: the
// manifest's format and fields, that every file lies in its subdirectory,
// and that every array has the shape the manifest gives.
package checkpoint
