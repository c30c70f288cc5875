//go:build unix

package timeline

import "syscall"

// oNoFollow makes Create refuse a symbolic link.
const oNoFollow = syscall.O_NOFOLLOW
