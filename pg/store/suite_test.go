package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/store/storetest"
)

var testSecret = []byte("store-test-secret-0123456789")

func TestHashStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
		s := store.NewHashStore(store.HashStoreOptions{Timeout: timeout})
		t.Cleanup(func() { s.Close() })
		return func() store.Store { return s }
	})
}

func TestPrefixStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
		base := store.NewHashStore(store.HashStoreOptions{Timeout: timeout})
		t.Cleanup(func() { base.Close() })
		return func() store.Store { return store.NewPrefixStore("group0", base) }
	})
}

// TestTCPStoreSuite: the first store opened hosts the server, as rank 0
// does; the others dial it.
func TestTCPStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		host, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
			Addr: "127.0.0.1:0", IsServer: true, Secret: testSecret, Timeout: timeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { host.Close() })
		opened := 0
		return func() store.Store {
			if opened++; opened == 1 {
				return host
			}
			c, err := store.NewTCPStore(context.Background(), store.TCPStoreOptions{
				Addr: host.Server().Addr(), Secret: testSecret, Timeout: timeout,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
	})
}

func TestFileStoreSuite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, timeout time.Duration) func() store.Store {
		path := filepath.Join(t.TempDir(), "store")
		return func() store.Store {
			s, err := store.NewFileStore(path, 0, store.FileStoreOptions{Timeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
	})
}
