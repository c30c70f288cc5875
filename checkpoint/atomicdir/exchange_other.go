//go:build !linux

package atomicdir

// exchange is not available here; Write moves the old directory aside
// first.
func exchange(a, b string) error { return errNoExchange }
