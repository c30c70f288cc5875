// Package dataset holds classification data in memory and loads it: the
// built-in synthetic problem, NumPy .npy files and MNIST's IDX files.
//
//	ds := dataset.Synthetic(seed, 8192)              // the default
//	ds, err := dataset.Load("X.npy", "y.npy", 0)     // or IDX; told by magic bytes
//	if errors.Is(err, dataset.ErrBadInput) { ... }   // exit 2
//	ds.Gather(batch, x, y)                           // copy a batch's rows out
//
// The loaders validate everything a user can get wrong (a missing file,
// the wrong format, shapes, non-integer labels, labels out of range,
// feature and label counts that differ, truncated files) and return an
// *InputError that names the file, says what to do, and matches
// ErrBadInput. Files may be gzip-compressed.
//
// No file can exhaust memory by what it declares: both files' headers are
// read first, and the sizes they declare checked against each other and
// against MaxValues before any data is read; data then arrives in chunks,
// so a compressed stream that declares more than it holds costs only what
// it holds. What is loaded is held compactly: IDX pixels stay a byte each
// (Dataset.Pixels), and become float64 only as a batch is gathered.
// Inspect checks files as Load does without holding their samples, for a
// launcher that leaves the loading to its workers.
package dataset
