package fsync

import "os"

// Dir syncs directory dir, making the renames and removals in it durable.
func Dir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
