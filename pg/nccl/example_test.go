package nccl_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/goddp/ddp/pg"
	pgnccl "github.com/goddp/ddp/pg/nccl"
	"github.com/goddp/ddp/pg/store"
)

// New needs the loaded libraries; without them it refuses at once with
// pg.ErrInvalidArgument, before touching the store.
func ExampleNew() {
	st := store.NewHashStore(store.HashStoreOptions{})
	defer st.Close()
	_, err := pgnccl.New(context.Background(), st, pgnccl.Options{Rank: 0, Size: 1})
	fmt.Println(errors.Is(err, pg.ErrInvalidArgument))
	// Output: true
}
