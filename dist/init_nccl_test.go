package dist

import (
	"testing"

	pgnccl "github.com/goddp/ddp/pg/nccl"
)

// TestNCCLEnvTiming: TORCH_NCCL_ENABLE_TIMING turns pg/nccl's timing
// events on as it does torch's; unset, empty or false leaves them off, and
// an option set in code is not turned off by the environment.
func TestNCCLEnvTiming(t *testing.T) {
	for _, tc := range []struct {
		env        map[string]string
		code, want bool
	}{
		{nil, false, false},
		{map[string]string{"TORCH_NCCL_ENABLE_TIMING": ""}, false, false},
		{map[string]string{"TORCH_NCCL_ENABLE_TIMING": "1"}, false, true},
		{map[string]string{"TORCH_NCCL_ENABLE_TIMING": "true"}, false, true},
		{map[string]string{"TORCH_NCCL_ENABLE_TIMING": "0"}, false, false},
		{map[string]string{"TORCH_NCCL_ENABLE_TIMING": "0"}, true, true},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		got, err := ncclEnv(pgnccl.Options{EnableTiming: tc.code}, lookup)
		if err != nil || got.EnableTiming != tc.want {
			t.Errorf("env %v, EnableTiming %v in code: got %v, %v; want %v", tc.env, tc.code, got.EnableTiming, err, tc.want)
		}
	}
}
