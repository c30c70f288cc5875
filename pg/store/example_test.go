package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/store"
)

// Rank 0 hosts the store and uses it; another rank dials it. Get waits
// until the key is set; Add keeps decimal text.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	secret := []byte("0123456789abcdef0123456789abcdef")

	rank0, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: "127.0.0.1:0", IsServer: true, Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rank0.Close()
	rank1, err := store.NewTCPStore(ctx, store.TCPStoreOptions{Addr: rank0.Server().Addr(), Secret: secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rank1.Close()

	go rank0.Set(ctx, "addr/0", []byte("10.0.0.1:40000"))
	addr, err := rank1.Get(ctx, "addr/0")
	fmt.Println(string(addr), err)

	rank0.Add(ctx, "arrived", 1)
	rank1.Add(ctx, "arrived", 1)
	n, _ := rank1.Get(ctx, "arrived")
	fmt.Println(string(n))

	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	_, err = rank1.Get(short, "addr/7")
	fmt.Println(errors.Is(err, pg.ErrTimeout))
	// Output:
	// 10.0.0.1:40000 <nil>
	// 2
	// true
}

// Processes on one machine can share a FileStore instead; the last of
// numWorkers to close removes the file.
func ExampleNewFileStore() {
	dir, _ := os.MkdirTemp("", "filestore")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "rendezvous")
	ctx := context.Background()

	a, _ := store.NewFileStore(path, 2, store.FileStoreOptions{})
	b, _ := store.NewFileStore(path, 2, store.FileStoreOptions{})
	a.Set(ctx, "k", []byte("v"))
	v, _ := b.Get(ctx, "k")
	fmt.Println(string(v))

	a.Close()
	b.Close()
	_, err := os.Stat(path)
	fmt.Println(errors.Is(err, os.ErrNotExist))
	// Output:
	// v
	// true
}

// Each process group keeps its keys under its own prefix.
func ExampleNewPrefixStore() {
	ctx := context.Background()
	base := store.NewHashStore(store.HashStoreOptions{})
	defer base.Close()
	pg0 := store.NewPrefixStore("pg0", base)
	pg0.Set(ctx, "rank/0", []byte("ready"))
	v, _ := base.Get(ctx, "pg0/rank/0")
	fmt.Println(string(v))
	// Output: ready
}

// Under torchrun, the agent already serves a c10d TCPStore at
// MASTER_ADDR:MASTER_PORT. Every rank dials it with DialC10d, which
// detects whether it speaks PyTorch 1.x's protocol or 2.x's, and keeps
// goddp's keys under their own prefix. The store is unauthenticated:
// publish addresses in it, never secrets.
func ExampleDialC10d() {
	agent, _ := startFakeC10d(store.C10dV2) // stands in for torchrun's agent
	defer agent.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := store.DialC10d(ctx, agent.Addr(), store.C10dOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println("protocol", c.Protocol())

	st := store.NewPrefixStore("goddp/my-run/0", c) // TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT
	st.Set(ctx, "addr/0", []byte("10.0.0.1:40000"))
	v, _ := c.Get(ctx, "goddp/my-run/0/addr/0")
	fmt.Println(string(v))
	n, _ := st.Add(ctx, "arrived", 1)
	fmt.Println(n)
	// Output:
	// protocol 2.x
	// 10.0.0.1:40000
	// 1
}
