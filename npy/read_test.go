package npy

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadRejects(t *testing.T) {
	hdr := func(dict string) string { return withHeader(1, dict, "") }
	f4 := func(shape string) string {
		return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"
	}
	for _, c := range []struct {
		name, file, want string
	}{
		{"empty file", "", "shorter than the .npy magic"},
		{"not npy", "PK\x03\x04 a zip file.....", "not a .npy file"},
		{"version 4", magic + "\x04\x00\x10\x00", "version 4.0 is not supported"},
		{"version 1.1", magic + "\x01\x01\x10\x00", "version 1.1 is not supported"},
		{"no header length", magic + "\x01\x00\x10", "inside the header length"},
		{"header cut", magic + "\x01\x00\x50\x00{'descr'", "inside the header"},
		{"header too long", magic + "\x02\x00\x01\x00\x01\x00", "more than the 65536 allowed"},
		{"not a dict", hdr("['descr', '<f4']"), "not a dictionary"},
		{"fortran", hdr("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"), "Fortran order"},
		{"big-endian", hdr("{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }"), "big-endian"},
		{"complex", hdr("{'descr': '<c16', 'fortran_order': False, 'shape': (1,), }"), `dtype "<c16" is not supported`},
		{"half", hdr("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }"), `dtype "<f2" is not supported`},
		{"object", hdr("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"), `dtype "|O" is not supported`},
		{"| on a wide type", hdr("{'descr': '|i4', 'fortran_order': False, 'shape': (1,), }"), "unknown byte order"},
		{"structured", hdr("{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }"), "structured dtypes"},
		{"missing key", hdr("{'descr': '<f4', 'shape': (1,), }"), `lacks the key "fortran_order"`},
		{"extra key", hdr("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"), `unknown key "x"`},
		{"repeated key", hdr("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}"), "repeats the key"},
		{"shape list", hdr(f4("[2, 3]")), "a tuple such as"},
		{"shape int", hdr(f4("(3)")), "is an integer, not a tuple"},
		{"negative dim", hdr(f4("(-1,)")), "negative dimension"},
		{"float dim", hdr(f4("(2.0,)")), "integer dimension"},
		{"huge dim", hdr(f4("(99999999999999999999999,)")), "too large for this machine"},
		{"huge product", hdr(f4("(4611686018427387904, 4)")), "too large for this machine"},
		{"too many dims", hdr(f4("(" + strings.Repeat("1, ", MaxDims+1) + ")")), "more than 64 dimensions"},
		{"bad bool", hdr("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (1,), }"), "True or False"},
		{"escaped string", hdr(`{'descr': '<f\4', 'fortran_order': False, 'shape': (1,), }`), "no escapes"},
		{"unclosed string", magic + "\x01\x00\x05\x00{'abc", "closing quote"},
		{"junk after dict", hdr(f4("(1,)") + " x"), "end of the header"},
		{"missing colon", hdr("{'descr' '<f4'}"), "':' after a key"},
		{"truncated data", withHeader(1, f4("(2, 3)"), "\x00\x00\x80\x3f"),
			"data is truncated: shape (2, 3) of <f4 needs 24 bytes of data but only 4"},
		{"trailing data", withHeader(1, f4("(1,)"), "\x00\x00\x80\x3f\x00"), "extra bytes after the data"},
	} {
		_, err := Read(strings.NewReader(c.file))
		var fe *FormatError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got error %v, want a *FormatError containing %q", c.name, err, c.want)
		}
	}
}

// ReadFile checks a regular file's size before reading the data, and
// names the file in its errors.
func TestReadFileLength(t *testing.T) {
	dir := t.TempDir()
	good := goldenF4
	for _, c := range []struct {
		name, file, want string
	}{
		{"exact", good, ""},
		{"short", good[:len(good)-1], "data is truncated"},
		{"long", good + "\x00", "extra bytes"},
		{"huge promise", withHeader(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }", "1234"),
			"data is truncated"},
	} {
		path := filepath.Join(dir, c.name+".npy")
		if err := os.WriteFile(path, []byte(c.file), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFile(path)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path)):
			t.Errorf("%s: got %v, want an error naming %s and containing %q", c.name, err, path, c.want)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.npy")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: got %v, want os.ErrNotExist", err)
	}
}
