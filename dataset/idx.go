package dataset

import (
	"encoding/binary"
	"io"
)

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned
// byte), then the number of dimensions.
const (
	idxUbyte  = 0x08
	idxImages = 3 // dimensions of an idx3-ubyte file: N, rows, cols
	idxLabels = 1 // dimensions of an idx1-ubyte file: N
)

// idxHeader reads an IDX header with ndims dimensions and returns them.
func (f *file) idxHeader(ndims int, kind string) ([]int, error) {
	var magic [4]byte
	if _, err := io.ReadFull(f.r, magic[:]); err != nil {
		return nil, f.idxTruncated(err)
	}
	if magic[2] != idxUbyte {
		return nil, inputErr(f.path,
			"is an IDX file of element type 0x%02x; only unsigned bytes (0x08, as in MNIST) are supported", magic[2])
	}
	if int(magic[3]) != ndims {
		swap := ""
		if magic[3] == idxImages || magic[3] == idxLabels {
			swap = "; did you swap the data and labels files?"
		}
		return nil, inputErr(f.path, "has IDX magic 0x%08x (%d dimensions), but %s need 0x%08x (%d)%s",
			binary.BigEndian.Uint32(magic[:]), magic[3], kind, 0x800+ndims, ndims, swap)
	}
	dims := make([]int, ndims)
	var b [4]byte
	for i := range dims {
		if _, err := io.ReadFull(f.r, b[:]); err != nil {
			return nil, f.idxTruncated(err)
		}
		dims[i] = int(binary.BigEndian.Uint32(b[:]))
	}
	return dims, nil
}

func (f *file) idxTruncated(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return inputErr(f.path, "is truncated inside its IDX header; download the file again")
	}
	return &InputError{Path: f.path, Msg: "cannot read the IDX header: " + err.Error(), Err: err}
}

// idxImagesHeader reads and checks an idx3-ubyte file's header.
func (f *file) idxImagesHeader() (declared, error) {
	dims, err := f.idxHeader(idxImages, "images")
	if err != nil {
		return declared{}, err
	}
	n, rows, cols := dims[0], dims[1], dims[2]
	if rows == 0 || cols == 0 {
		return declared{}, inputErr(f.path, "holds images of %d×%d pixels; the file is corrupt", rows, cols)
	}
	if rows > MaxValues/cols || n > MaxValues/(rows*cols) {
		return declared{}, inputErr(f.path,
			"claims %d images of %d×%d pixels, more than the %d bytes supported; the file is corrupt or too large", n, rows,
			cols, MaxValues)
	}
	if n == 0 {
		return declared{}, inputErr(f.path, "has no samples; a data set needs at least one")
	}
	return declared{n: n, shape: []int{1, rows, cols}}, nil
}

// idxImages reads the images h describes, as bytes (Note [compact
// samples]); with check, it only checks that they are all there and drops
// them as they arrive.
func (f *file) idxImages(h declared, check bool) (features, error) {
	n := int64(h.n * h.shape[1] * h.shape[2])
	if check {
		return features{n: h.n, shape: h.shape}, f.skipFull(n, "pixels")
	}
	if f.sized() {
		pix, err := f.readFull(n, "pixels")
		if err != nil {
			return features{}, err
		}
		return features{pixels: pix, n: h.n, shape: h.shape}, nil
	}
	pix, err := f.readTwice(n, func(g *file) error { _, err := g.idxImagesHeader(); return err })
	if err != nil {
		return features{}, err
	}
	return features{pixels: pix, n: h.n, shape: h.shape}, nil
}

// Note [read twice]: a compressed stream's length is known only once it
// has been read, so reading it into memory as it arrives (bounded.ReadFull)
// costs up to twice its size at the end, when its pieces are joined.
// readTwice reads it first into nothing, which checks its length in
// constant memory, then opens it again and reads it into a buffer of
// exactly the size it was found to have: a gzip IDX file costs its
// inflated size once, for a second pass of decompression.
func (f *file) readTwice(n int64, header func(*file) error) ([]byte, error) {
	if err := f.skipFull(n, "pixels"); err != nil {
		return nil, err
	}
	g, err := openFile(f.path)
	if err != nil {
		return nil, err
	}
	defer g.close()
	if err := header(g); err != nil {
		return nil, err
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(g.r, data); err != nil {
		return nil, &InputError{Path: f.path, Msg: "changed while it was read (" + err.Error() + "); read it again", Err: err}
	}
	return data, nil
}

// idxLabelsHeader reads an idx1-ubyte file's header.
func (f *file) idxLabelsHeader() (declared, error) {
	dims, err := f.idxHeader(idxLabels, "labels")
	if err != nil {
		return declared{}, err
	}
	return declared{n: dims[0]}, nil // load checks n against the features
}

// idxLabels reads the labels h describes.
func (f *file) idxLabels(h declared) ([]int, error) {
	b, err := f.readFull(int64(h.n), "labels")
	if err != nil {
		return nil, err
	}
	y := make([]int, len(b))
	for i, l := range b {
		y[i] = int(l)
	}
	return y, nil
}
