// Package atomicdir replaces a directory's contents as a whole, so that
// readers, and a program restarted after a crash, see either all of the
// old files or all of the new ones, never a mixture or a part.
//
//	err := atomicdir.Write("out/model", func(tmp string) error {
//		return os.WriteFile(filepath.Join(tmp, "fc1.weight.npy"), data, 0o644)
//	})
//
// rename(2) cannot replace a non-empty directory, so Write swaps the new
// directory and the old one with renameat2(RENAME_EXCHANGE) on Linux, and
// elsewhere (or on a file system without it) moves the old one aside
// first. Write creates its temporary directory in dir's parent, so that
// parent is the directory it needs to write: checkpoint's saves use it for
// each DIR/step-NNNNNNNNN, so that they write only inside the user's DIR
// and never replace DIR itself.
package atomicdir
