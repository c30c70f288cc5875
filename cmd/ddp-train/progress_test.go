package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal's two ends (Linux's /dev/ptmx).
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("opening the terminal end: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

// /dev/null, a file and a pipe are not terminals; a pseudo-terminal is,
// and its width is the one set on it, followed when it changes.
func TestTerminalDetection(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	file, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"/dev/null": null, "a file": file, "a pipe": w} {
		if tty, width := terminal(f); tty || width() != defaultColumns {
			t.Errorf("%s: terminal %v, width %d", name, tty, width())
		}
	}
	if tty, _ := terminal(&strings.Builder{}); tty {
		t.Error("a strings.Builder is a terminal")
	}

	_, pts := openPTY(t)
	for _, cols := range []uint16{132, 41} {
		if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
			t.Fatal(err)
		}
		tty, width := terminal(pts)
		if !tty || width() != int(cols) {
			t.Errorf("a %d-column pseudo-terminal: terminal %v, width %d", cols, tty, width())
		}
	}
}

// The bar fills what the figures leave of the terminal's width, and the
// line never reaches the last column, however narrow the terminal.
func TestBarLineFitsTheTerminal(t *testing.T) {
	r := figures{Loss: 0.1234, Accuracy: 0.5, SamplesPerSec: 12345, CommFraction: 0.25}
	bars := map[int]int{}
	for _, cols := range []int{0, 1, 20, 60, 80, 120, 300} {
		for _, step := range []int{0, 50, 100} {
			line := barLine(step, 100, r, cols)
			if len(line) > max(cols-1, 0) {
				t.Errorf("%d columns, step %d: %d-character line %q", cols, step, len(line), line)
			}
			if cols >= 80 &&
				!strings.Contains(line, fmt.Sprintf(" %d/100 loss 0.1234 acc 50.0%% 12345 samples/s comm 25%%", step)) {
				t.Errorf("%d columns: figures missing from %q", cols, line)
			}
			if step == 100 && cols >= 80 {
				bars[cols] = strings.Count(line, "=")
			}
		}
	}
	if !(bars[80] < bars[120] && bars[120] == 50 && bars[300] == 50) {
		t.Errorf("bar widths by terminal width %v: want wider on a wider terminal, up to 50", bars)
	}
	if half := barLine(50, 100, r, 300); strings.Count(half, "=") != 25 {
		t.Errorf("half way: %q", half)
	}
}
