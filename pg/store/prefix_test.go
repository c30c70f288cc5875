package store_test

import (
	"testing"
	"time"

	"github.com/goddp/ddp/pg/store"
)

func TestPrefixStoreKeysLiveUnderPrefix(t *testing.T) {
	base := store.NewHashStore(store.HashStoreOptions{Timeout: time.Second})
	defer base.Close()
	a, b := store.NewPrefixStore("pg0", base), store.NewPrefixStore("pg1", base)
	ctx := ctx10s(t)
	if err := a.Set(ctx, "rank", []byte("A")); err != nil {
		t.Fatal(err)
	}
	if err := b.Set(ctx, "rank", []byte("B")); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"pg0/rank": "A", "pg1/rank": "B"} {
		if v, err := base.Get(ctx, key); err != nil || string(v) != want {
			t.Fatalf("base Get(%q) = %q, %v; want %q", key, v, err, want)
		}
	}
	if v, err := a.Get(ctx, "rank"); err != nil || string(v) != "A" {
		t.Fatalf("a.Get = %q, %v", v, err)
	}
	if a.Base() != store.Store(base) {
		t.Fatal("Base does not return the base store")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Get(ctx, "rank"); err != nil || string(v) != "B" {
		t.Fatalf("closing one PrefixStore broke another on the same base: %q, %v", v, err)
	}
}
