package libnccl

import (
	"errors"
	"strings"
	"testing"
)

// A library without the 2.19/2.27 symbols, or too old for them, reports
// them missing and every call says which version it needs.
func TestRegistrationOptionalBySymbolAndVersion(t *testing.T) {
	var fake uintptr = 1 // never called: the checks come first
	for _, tc := range []struct {
		name                  string
		lib                   *Library
		memAlloc, reg, window bool
	}{
		{"2.18 without symbols", &Library{path: "old.so", version: 21805}, false, false, false},
		{"2.26 with register",
			&Library{path: "mid.so", version: 22603,
				fn: ncclFuncs{memAlloc: fake, memFree: fake, commRegister: fake, commDeregister: fake}}, true, true, false},
		{"2.28 with window symbols missing",
			&Library{path: "stripped.so", version: 22800,
				fn: ncclFuncs{memAlloc: fake, memFree: fake, commRegister: fake, commDeregister: fake}}, true, true, false},
		{"2.28 complete",
			&Library{path: "new.so", version: 22800,
				fn: ncclFuncs{memAlloc: fake, memFree: fake, commRegister: fake, commDeregister: fake, winRegister: fake,
					winDeregister: fake}}, true, true, true},
		{"2.26 claiming window symbols",
			&Library{path: "odd.so", version: 22600, fn: ncclFuncs{winRegister: fake, winDeregister: fake}}, false, false,
			false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.lib.HasMemAlloc(); got != tc.memAlloc {
				t.Errorf("HasMemAlloc = %v, want %v", got, tc.memAlloc)
			}
			if got := tc.lib.HasRegister(); got != tc.reg {
				t.Errorf("HasRegister = %v, want %v", got, tc.reg)
			}
			if got := tc.lib.HasWindows(); got != tc.window {
				t.Errorf("HasWindows = %v, want %v", got, tc.window)
			}
			if !tc.window {
				c := &Comm{lib: tc.lib}
				_, err := c.WindowRegister(0, 8, WinCollSymmetric)
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "2.27") {
					t.Errorf("WindowRegister on %s = %v, want ErrUnsupported naming 2.27", tc.lib.path, err)
				}
			}
			if !tc.reg {
				c := &Comm{lib: tc.lib}
				_, err := c.Register(0, 8)
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "2.19") {
					t.Errorf("Register on %s = %v, want ErrUnsupported naming 2.19", tc.lib.path, err)
				}
				if _, err := tc.lib.MemAlloc(nil, 8); !errors.Is(err, ErrUnsupported) {
					t.Errorf("MemAlloc on %s = %v, want ErrUnsupported", tc.lib.path, err)
				}
			}
		})
	}
}
