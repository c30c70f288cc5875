package bucket

import (
	"testing"

	"github.com/goddp/ddp/pg"
)

func TestBucketLayout(t *testing.T) {
	numel := []int{3, 5, 2}
	b := New(0, []int{2, 0}, numel, pg.Float32, 100)
	if got := b.Buffer.Len(); got != 5 {
		t.Fatalf("buffer holds %d elements, want 5", got)
	}
	if b.Offsets[0] != 0 || b.Offsets[1] != 2 || b.Lengths[1] != 3 {
		t.Fatalf("offsets %v lengths %v", b.Offsets, b.Lengths)
	}
	v := pg.View[float32](b.View(1))
	v[0] = 7
	if pg.View[float32](b.Buffer)[2] != 7 {
		t.Fatal("view does not share the bucket's memory")
	}
	if b.Bytes() != 20 {
		t.Fatalf("Bytes = %d, want 20", b.Bytes())
	}
}
