// Package fsync makes renames durable. A file written to a temporary
// name, synced and renamed into place survives a crash only once the
// directory that holds the new name is synced too (rename(2) changes the
// directory, not the file), so every atomic writer of this module ends
// with Dir:
//
//	f.Sync(); f.Close()
//	os.Rename(f.Name(), path)
//	fsync.Dir(filepath.Dir(path))
//
// WriteFile is that sequence for one file, from a temporary file made
// with O_EXCL beside it, so that a link planted at the file's name is
// replaced, never written through.
//
// It imports only the standard library, so npy, checkpoint,
// checkpoint/atomicdir and the model zoo share it without importing one
// another.
package fsync
