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
// Every checkpoint is a subdirectory of dir, and dir/latest names the
// newest; Options.Keep says how many are kept (1 by default):
//
//	dir/step-000000200/                the checkpoint of step 200 (nine digits):
//	dir/step-000000200/manifest.json   format, step, dtype, names, shapes, files, each file's size
//	                                   and CRC-32C, meta; its own CRC-32C on its last line
//	dir/step-000000200/params/<name>.npy  one per parameter, with its shape if known (float64)
//	dir/step-000000200/optimizer/<k>.npy  one per optimizer buffer, a vector (float64)
//	dir/step-000000200/extra/<k>.npy      one per Extra entry, a vector (float64)
//	dir/step-000000200/<name>             one per Files entry (ddp-train's model-card.json)
//	dir/latest                         "step-000000200 crc32c:XXXXXXXX": the newest, replaced atomically
//	dir/.ddp-train.lock                Lock's file (Note [one run per checkpoint directory])
//
// dir is the user's: a save writes and deletes only the names above (and
// its temporaries, .step-NNNNNNNNN.tmp-N and .latest.tmp-N), never
// replaces or removes dir itself, and leaves every other file in it alone
// (Note [a checkpoint owns only its files]); CheckDir refuses a directory
// where a file of those names is not a checkpoint's. Load also reads a
// checkpoint in the layout older versions wrote, dir/manifest.json with
// dir/params, dir/optimizer and dir/extra, so that a run resumes across
// the upgrade; the first new save removes that checkpoint's files, as its
// manifest lists them, and nothing else.
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
// shapes (Capture does), dir/step-NNNNNNNNN/params holds ordinary .npy files that numpy
// (or package npy) reads, and that ddp-train's --init takes as they are.
//
// A Model is any model's parameters by index; Nodes adapts a Gorgonia
// model's parameter nodes.
//
// # Atomicity
//
// A save writes the new checkpoint into a fresh temporary directory
// inside dir, syncs every file and the directory, and renames it into
// place (atomicdir.Write, which swaps it in where a checkpoint of the same
// step is there); then it points dir/latest at it (a synced temporary
// file renamed over the old), and only then removes older checkpoints. A
// failure or a crash at any point leaves dir/latest naming a whole
// checkpoint, the previous one or the new one; the next save removes a
// crashed one's leftovers. Everything happens inside dir, so it works on a
// mount point and under a parent the run cannot write. One process saves
// to a given dir at a time (Lock).
//
// Load reads only into typed structures and checks everything: the
// manifest's format and fields, that every file lies in its subdirectory,
// and that every array has the shape the manifest gives.
package checkpoint
