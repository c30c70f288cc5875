package wire_test

import (
	"bytes"
	"fmt"

	"github.com/goddp/ddp/pg/internal/wire"
)

// A frame carries a payload built with the Append functions; the receiver
// parses the header with a length cap and decodes fields in the same order.
func Example() {
	var conn bytes.Buffer
	payload := wire.AppendString(nil, "rank")
	payload = wire.AppendUint64(payload, 3)
	if err := wire.WriteFrame(&conn, wire.Header{Kind: 1, Seq: 7}, payload); err != nil {
		panic(err)
	}

	var hb [wire.HeaderSize]byte
	h, err := wire.ReadHeader(&conn, &hb, 1<<10)
	if err != nil {
		panic(err)
	}
	d := wire.NewDecoder(conn.Next(int(h.Len)))
	key, value := d.String(), d.Uint64()
	fmt.Println(h.Kind, h.Seq, key, value, d.Finish())

	// A header that announces more than the cap is refused before any
	// payload is read.
	wire.WriteFrame(&conn, wire.Header{}, make([]byte, 2048))
	_, err = wire.ReadHeader(&conn, &hb, 1<<10)
	fmt.Println(err)
	// Output:
	// 1 7 rank 3 <nil>
	// communication error: frame payload of 2048 bytes exceeds the cap of 1024
}
