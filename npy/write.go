package npy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/goddp/ddp/internal/fsync"
)

// Write writes data as a .npy file with the given shape, byte for byte as
// numpy.save would: a version 1.0 header padded with spaces to a multiple
// of 64 bytes, then the elements in C order, little-endian.
// data is []float32 ("<f4"), []float64 ("<f8"), []int32 ("<i4") or
// []int64 ("<i8"), and its length must equal the product of shape.
func Write(w io.Writer, shape []int, data any) error {
	descr, n, err := describe(data)
	if err != nil {
		return err
	}
	if len(shape) > MaxDims {
		return fmt.Errorf("npy: shape has %d dimensions, more than the %d allowed; reshape the array", len(shape), MaxDims)
	}
	a := Array{Shape: shape}
	if got := a.Len(); got != n {
		return fmt.Errorf("npy: shape %v holds %d elements but data has %d; pass a shape whose product is len(data)", shape,
			got, n)
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	if _, err := bw.Write(formatHeader(descr, shape)); err != nil {
		return err
	}
	switch d := data.(type) {
	case []float32:
		err = writeLE(bw, d)
	case []float64:
		err = writeLE(bw, d)
	case []int32:
		err = writeLE(bw, d)
	case []int64:
		err = writeLE(bw, d)
	}
	if err != nil {
		return err
	}
	return bw.Flush()
}

// describe returns the dtype string and length of a supported slice.
func describe(data any) (string, int, error) {
	switch d := data.(type) {
	case []float32:
		return "<f4", len(d), nil
	case []float64:
		return "<f8", len(d), nil
	case []int32:
		return "<i4", len(d), nil
	case []int64:
		return "<i8", len(d), nil
	}
	return "", 0, fmt.Errorf("npy: cannot write %T; pass []float32, []float64, []int32 or []int64", data)
}

// writeLE writes d little-endian, a chunk at a time so that a large
// array needs no second copy in memory.
func writeLE[T float32 | float64 | int32 | int64](w io.Writer, d []T) error {
	const chunk = 8192
	for len(d) > 0 {
		k := min(len(d), chunk)
		if err := binary.Write(w, binary.LittleEndian, d[:k]); err != nil {
			return err
		}
		d = d[k:]
	}
	return nil
}

// WriteFile writes data to path as Write does, atomically: it writes a
// temporary file in the same directory, syncs it and renames it over path,
// so path holds either its old contents or all of the new ones. The file's
// mode is 0644.
func WriteFile(path string, shape []int, data any) error {
	if _, _, err := describe(data); err != nil {
		return err
	}
	return fsync.WriteFile(path, func(w io.Writer) error { return Write(w, shape, data) })
}
