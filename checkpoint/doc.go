// Package checkpoint saves and restores everything a training run needs
// to continue exactly: the step, the parameters, the optimizer's state,
// and any extra state (a comm hook's, say), as .npy files and a JSON
// manifest, replaced atomically.
//
//	// rank 0, after the optimizer's Step of training step s (counting from 1):
//	err := checkpoint.Save(dir, checkpoint.Capture(s, params, opt))
//
//	// on resume, every rank, before ddp.Wrap:
//	c, err := checkpoint.Load(dir)
//	err = c.Restore(params, opt) // errors.Is(err, checkpoint.ErrIncompatible): exit 2
//	// continue with step c.Step+1; the sampler's position follows from c.Step
//
// # Layout
//
//	dir/manifest.json          format, step, dtype, names, shapes, files, each file's size
//	                           and CRC-32C, meta; its own CRC-32C on its last line
//	dir/params/<name>.npy      one per parameter, with its shape if known (float64)
//	dir/optimizer/<k>.npy      one per optimizer buffer, a vector (float64)
//	dir/extra/<k>.npy          one per Extra entry, a vector (float64)
//
// SaveWith and LoadWith with Options.Keep K > 1 keep the last K
// checkpoints instead, each in the layout above:
//
//	dir/step-000000100/        the checkpoint of step 100 (nine digits)
//	dir/step-000000200/
//	dir/latest                 "step-000000200 crc32c:XXXXXXXX": the newest, replaced atomically
//
// # Checksums
//
// Load verifies the manifest's own checksum and every file's size and
// CRC-32C before it parses anything, and refuses a damaged checkpoint
// with an error that names the file and wraps ErrBadCheckpoint and
// ErrDamaged. LoadWith with Keep > 1 then falls back to the newest intact
// checkpoint, logging a warning for each damaged one it passes; with Keep
// 1 a damaged checkpoint is an error. CRC-32C and not SHA-256: see Note
// [checksums] in checksum.go. A checkpoint of format 1, written before
// checksums, loads with a warning that its files cannot be verified (so a
// run can resume across an upgrade); the next checkpoint has them.
//
// Everything is stored as float64, which holds float32 values exactly, so
// a float32 run resumes bit for bit too. When the checkpoint records the
// shapes (Capture does), dir/params holds ordinary .npy files that numpy
// (or package npy) reads, and that ddp-train's --init takes as they are.
//
// A Model is any model's parameters by index; Nodes adapts a Gorgonia
// model's parameter nodes.
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
