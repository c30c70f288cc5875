package dataset

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/goddp/ddp/internal/bounded"
)

// Magic bytes that tell the formats apart.
const (
	npyMagic  = "\x93NUMPY"
	gzipMagic = "\x1f\x8b"
)

// format is the kind of an input file, told by its first bytes.
type format int

const (
	formatUnknown format = iota
	formatNPY
	formatIDX
)

// file is an opened input file, decompressed if it was gzip.
type file struct {
	path   string
	r      io.Reader // the contents from the start; the *os.File itself unless gzip
	format format
	close  func() error
}

// openFile opens path, looks through gzip and tells the format.
func openFile(path string) (*file, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &InputError{Path: path, Msg: "cannot open: " + pathErrText(err) + "; check the path", Err: err}
	}
	var head [8]byte
	k, err := io.ReadFull(f, head[:])
	if err == nil || err == io.EOF || err == io.ErrUnexpectedEOF {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil { // such as a directory

		f.Close()
		return nil, &InputError{Path: path, Msg: "cannot read: " + pathErrText(err), Err: err}
	}
	in := &file{path: path, r: f, close: f.Close}
	if bytes.HasPrefix(head[:k], []byte(gzipMagic)) {
		gz, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, &InputError{Path: path, Msg: "is not a valid gzip file: " + err.Error(), Err: err}
		}
		br := bufio.NewReader(gz)
		p, _ := br.Peek(len(head))
		k = copy(head[:], p)
		in.r = br
	}
	in.format = sniff(head[:k])
	return in, nil
}

// sniff tells the format from the first bytes.
func sniff(head []byte) format {
	switch {
	case bytes.HasPrefix(head, []byte(npyMagic)):
		return formatNPY
	case len(head) >= 4 && head[0] == 0 && head[1] == 0:
		return formatIDX
	}
	return formatUnknown
}

func (f *file) unknownErr() error {
	return inputErr(f.path, "is neither a .npy file (it would start with \\x93NUMPY) nor an IDX file like MNIST's "+
		"train-images-idx3-ubyte; save arrays with numpy.save")
}

// pathErrText is the reason in an *fs.PathError, without the repeated path.
func pathErrText(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// sized reports whether f is a regular file read as it is (not through
// gzip), whose size readFull checks before it allocates.
func (f *file) sized() bool {
	osf, ok := f.r.(*os.File)
	if !ok {
		return false
	}
	fi, err := osf.Stat()
	return err == nil && fi.Mode().IsRegular()
}

// readFull reads exactly n bytes from f and checks that nothing follows.
// A plain file's size is checked first; otherwise memory grows only as
// data arrives (bounded.ReadFull), so a corrupt header, or a small gzip
// stream that declares gigabytes, cannot make it allocate much more than
// it read.
func (f *file) readFull(n int64, what string) ([]byte, error) {
	sized := false
	if osf, ok := f.r.(*os.File); ok {
		if fi, err := osf.Stat(); err == nil && fi.Mode().IsRegular() {
			if pos, err := osf.Seek(0, io.SeekCurrent); err == nil {
				if fi.Size()-pos != n {
					return nil, f.lengthErr(n, fi.Size()-pos, what)
				}
				sized = true
			}
		}
	}
	data, got, err := bounded.ReadFull(f.r, n, sized)
	if err != nil {
		return nil, &InputError{Path: f.path, Msg: "cannot read " + what + ": " + err.Error(), Err: err}
	}
	if data == nil {
		return nil, f.lengthErr(n, got, what)
	}
	var one [1]byte
	switch k, err := io.ReadFull(f.r, one[:]); {
	case k > 0:
		return nil, f.lengthErr(n, n+1, what)
	case err != io.EOF: // such as a gzip checksum error
		return nil, &InputError{Path: f.path, Msg: "cannot read " + what + ": " + err.Error(), Err: err}
	}
	return data, nil
}

// skipFull reads exactly n bytes from f, keeping none, and checks that
// nothing follows: readFull's checks in constant memory.
func (f *file) skipFull(n int64, what string) error {
	got, err := io.CopyN(io.Discard, f.r, n)
	switch {
	case got < n && (err == nil || err == io.EOF):
		return f.lengthErr(n, got, what)
	case err != nil:
		return &InputError{Path: f.path, Msg: "cannot read " + what + ": " + err.Error(), Err: err}
	}
	var one [1]byte
	switch k, err := io.ReadFull(f.r, one[:]); {
	case k > 0:
		return f.lengthErr(n, n+1, what)
	case err != io.EOF:
		return &InputError{Path: f.path, Msg: "cannot read " + what + ": " + err.Error(), Err: err}
	}
	return nil
}

func (f *file) lengthErr(want, got int64, what string) error {
	if got < want {
		return inputErr(f.path,
			"is truncated: the header promises %d bytes of %s but only %d follow; download or write the file again", want, what,
			got)
	}
	return inputErr(f.path, "has bytes after the %d bytes of %s its header promises; the file is corrupt", want, what)
}
