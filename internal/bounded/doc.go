// Package bounded reads data whose length comes from a header that may
// lie: a corrupt file, or a small compressed stream that declares
// gigabytes. ReadFull's memory follows the bytes that actually arrive,
// never the length claimed, so a claim cannot exhaust memory by itself.
//
//	data, got, err := bounded.ReadFull(gz, declared, false)
//	switch {
//	case err != nil: // a read error, such as a gzip checksum error
//	case data == nil: // the stream ended after got < declared bytes
//	}
//
// It is internal because only the file readers of this module (npy,
// dataset) need it.
package bounded
