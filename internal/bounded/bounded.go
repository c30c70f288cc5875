package bounded

import (
	"errors"
	"io"
)

// Chunk is the size of the pieces in which ReadFull reads a stream of
// unknown length: what it holds beyond the bytes that arrived is at most
// one Chunk.
const Chunk = 4 << 20

// ReadFull reads exactly n bytes from r. When r ends first, it returns
// nil data, the number of bytes that arrived and a nil error; another
// read error is returned as it is, with the bytes that arrived before it.
// It does not read past n: whether more follows is the caller's check.
//
// sized says that r is known to hold at least n bytes (a regular file
// whose size the caller checked): then the n bytes are allocated at once.
// Otherwise they are read in Chunk-sized pieces and joined into one slice
// only once all n have arrived, so memory grows with the data, and a
// stream that ends early costs no more than what it held.
func ReadFull(r io.Reader, n int64, sized bool) (data []byte, got int64, err error) {
	if n < 0 {
		return nil, 0, errors.New("bounded: negative length")
	}
	if sized || n <= Chunk {
		data = make([]byte, n)
		k, err := io.ReadFull(r, data)
		return finish(data, int64(k), err)
	}
	var chunks [][]byte
	for got < n {
		c := make([]byte, min(Chunk, n-got))
		k, err := io.ReadFull(r, c)
		got += int64(k)
		chunks = append(chunks, c[:k])
		if err != nil {
			return finish(nil, got, err)
		}
	}
	data = make([]byte, 0, n)
	for _, c := range chunks {
		data = append(data, c...)
	}
	return data, got, nil
}

// finish turns io.ReadFull's end of data into ReadFull's results.
func finish(data []byte, got int64, err error) ([]byte, int64, error) {
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return nil, got, nil
	case err != nil:
		return nil, got, err
	}
	return data, got, nil
}
