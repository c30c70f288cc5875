//go:build !unix

package timeline

// oNoFollow: this platform's open cannot refuse a link.
const oNoFollow = 0
