package launch

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestLoopbackFlags(t *testing.T) {
	var l Loopback
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	l.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (Loopback{Timeout: 5 * time.Minute, SharedMemory: true}); l != want {
		t.Errorf("defaults %+v, want %+v", l, want)
	}
	if err := fs.Parse([]string{"--timeout", "1s", "--link-bytes-per-sec", "1000", "--shm=false"}); err != nil {
		t.Fatal(err)
	}
	if want := (Loopback{Timeout: time.Second, LinkBytesPerSec: 1000}); l != want {
		t.Errorf("parsed %+v, want %+v", l, want)
	}
}
