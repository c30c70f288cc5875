package npy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"

	"github.com/goddp/ddp/internal/bounded"
)

const (
	magic  = "\x93NUMPY"
	maxInt = math.MaxInt
)

// Array is one array from a .npy file.
type Array struct {
	Shape []int  // dimensions in C (row-major) order; empty for a scalar
	Descr string // numpy dtype string as stored, e.g. "<f4"
	Data  []byte // the raw elements, little-endian, len = Len() * item size
}

// FormatError reports a file that is not a valid or supported .npy file,
// or an Array that cannot be converted as asked. Msg says what is wrong
// and what to do about it.
type FormatError struct {
	Path string // the file, when known (ReadFile); empty from Read
	Msg  string
	Err  error // an underlying I/O error, if any
}

func (e *FormatError) Error() string {
	s := "npy: "
	if e.Path != "" {
		s += e.Path + ": "
	}
	s += e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FormatError) Unwrap() error { return e.Err }

func formatErr(format string, args ...any) error {
	return &FormatError{Msg: fmt.Sprintf(format, args...)}
}

// Len returns the number of elements: the product of Shape, 1 for a
// scalar (shape ()). It returns -1 if a dimension is negative or the
// product overflows int.
func (a *Array) Len() int {
	n := 1
	for _, d := range a.Shape {
		if d < 0 || d > 0 && n > maxInt/d {
			return -1
		}
		n *= d
	}
	return n
}

// ReadFile reads the .npy file at path. Errors about the file's contents
// are *FormatError with Path set; a missing file gives os.Open's error.
func ReadFile(path string) (*Array, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a, err := Read(f)
	if fe, ok := errors.AsType[*FormatError](err); ok {
		fe.Path = path
	}
	return a, err
}

// Header is what a .npy file says of its array before the data: its
// shape and dtype. ReadHeader returns it, so that a caller can check the
// shape (against another file, or a limit of its own) before any data is
// read.
type Header struct {
	Shape []int  // dimensions in C (row-major) order; empty for a scalar
	Descr string // numpy dtype string as stored, e.g. "<f4"
}

// Len returns the number of elements, as Array.Len does: -1 if the
// product overflows int.
func (h Header) Len() int { return (&Array{Shape: h.Shape}).Len() }

// Read reads one array from r, which must hold exactly one .npy file:
// bytes after the array's data are an error. It is ReadHeader, then
// ReadData.
func Read(r io.Reader) (*Array, error) {
	h, err := ReadHeader(r)
	if err != nil {
		return nil, err
	}
	return ReadData(r, h)
}

// ReadHeader reads the magic, version and header of the .npy file at the
// start of r, checks that Read supports the array, and leaves r at the
// first byte of the data.
func ReadHeader(r io.Reader) (Header, error) {
	h, _, err := readHeader(r)
	if err != nil {
		return Header{}, err
	}
	return Header{Shape: h.shape, Descr: h.descr}, nil
}

// ReadData reads the data of the array that h, from ReadHeader(r),
// describes, and checks that nothing follows it. When r is a regular
// *os.File, ReadData checks the file's size before allocating; otherwise
// memory follows the data as it arrives, never the size h claims, so a
// header that promises more data than follows (a small gzip stream that
// declares gigabytes) cannot make it allocate much more than it read.
func ReadData(r io.Reader, h Header) (*Array, error) {
	dt, err := parseDescr(h.Descr)
	if err != nil {
		return nil, err
	}
	a := &Array{Shape: h.Shape, Descr: h.Descr}
	n := a.Len()
	if n < 0 || n > maxInt/dt.size {
		return nil, formatErr("shape %s of %s is too large for this machine", pyTuple(h.Shape), h.Descr)
	}
	if a.Data, err = readData(r, n*dt.size, a); err != nil {
		return nil, err
	}
	return a, nil
}

// readHeader reads the magic, version and header dictionary, and checks
// that the array is one Read supports.
func readHeader(r io.Reader) (header, dtype, error) {
	var pre [12]byte
	if _, err := io.ReadFull(r, pre[:8]); err != nil {
		return header{}, dtype{}, ioErr("the file is shorter than the .npy magic", err)
	}
	if string(pre[:6]) != magic {
		return header{}, dtype{}, formatErr("not a .npy file: it does not start with \\x93NUMPY; write it with numpy.save")
	}
	major, minor := pre[6], pre[7]
	lenBytes := 4
	switch {
	case major == 1 && minor == 0:
		lenBytes = 2
	case (major == 2 || major == 3) && minor == 0:
	default:
		return header{}, dtype{}, formatErr(
			"format version %d.%d is not supported (only 1.0, 2.0 and 3.0); save it with numpy.save", major, minor)
	}
	if _, err := io.ReadFull(r, pre[8:8+lenBytes]); err != nil {
		return header{}, dtype{}, ioErr("the file ends inside the header length", err)
	}
	hlen := int(binary.LittleEndian.Uint16(pre[8:]))
	if lenBytes == 4 {
		hlen = int(binary.LittleEndian.Uint32(pre[8:]))
	}
	if hlen > MaxHeaderLen {
		return header{}, dtype{}, formatErr(
			"header is %d bytes, more than the %d allowed; the file is corrupt or holds a structured array", hlen, MaxHeaderLen)
	}
	buf := make([]byte, hlen)
	if _, err := io.ReadFull(r, buf); err != nil {
		return header{}, dtype{}, ioErr("the file ends inside the header", err)
	}
	h, err := parseHeader(buf)
	if err != nil {
		return header{}, dtype{}, err
	}
	if h.fortran {
		return header{}, dtype{}, formatErr(
			"the array is stored in Fortran order; save it in C order: numpy.save(path, numpy.ascontiguousarray(a))")
	}
	dt, err := parseDescr(h.descr)
	return h, dt, err
}

// readData reads exactly n bytes of data and checks that nothing follows.
func readData(r io.Reader, n int, a *Array) ([]byte, error) {
	rem, sized := remaining(r)
	if sized && rem != int64(n) {
		return nil, lengthErr(a, n, rem)
	}
	data, got, err := bounded.ReadFull(r, int64(n), sized)
	if err != nil {
		return nil, ioErr("cannot read the data", err)
	}
	if data == nil {
		return nil, lengthErr(a, n, got)
	}
	var one [1]byte
	switch k, err := io.ReadFull(r, one[:]); {
	case k > 0:
		return nil, lengthErr(a, n, int64(n)+1)
	case err != io.EOF: // such as a gzip checksum error in the caller's reader
		return nil, ioErr("cannot read past the data", err)
	}
	return data, nil
}

// remaining reports how many bytes are left in r when r is a regular file.
func remaining(r io.Reader) (int64, bool) {
	f, ok := r.(interface {
		io.Seeker
		Stat() (fs.FileInfo, error)
	})
	if !ok {
		return 0, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	pos, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, false
	}
	return fi.Size() - pos, true
}

func lengthErr(a *Array, want int, got int64) error {
	what := "shape " + pyTuple(a.Shape) + " of " + a.Descr + " needs " + strconv.Itoa(want) + " bytes of data"
	if got < int64(want) {
		return formatErr("data is truncated: %s but only %d follow the header; the file is incomplete, write it again", what,
			got)
	}
	return formatErr(
		"extra bytes after the data: %s but more follow; a .npy file holds exactly one array (use one file per array)", what)
}

// ioErr reports a failed read; running out of bytes is a truncated file.
func ioErr(msg string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return formatErr("%s; the file is truncated or not a .npy file", msg)
	}
	return &FormatError{Msg: msg, Err: err}
}
