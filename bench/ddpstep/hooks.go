package main

import (
	"fmt"
	"strings"

	"github.com/goddp/ddp/commhook"
)

// hookNames are --hook's choices: ddp-train's --comm-hook names.
var hookNames = []string{"allreduce", "fp16", "bf16", "powersgd", "batched-powersgd", "noop"}

// newHook builds --hook's hook for one rank. The PowerSGD hooks compress
// from iteration --powersgd-start-iter (default 2, so that the timed
// steps compress), with torch's other defaults.
func newHook(c config) (commhook.Hook, error) {
	switch c.hook {
	case "allreduce":
		return commhook.Allreduce{}, nil
	case "fp16":
		return commhook.FP16Compress(), nil
	case "bf16":
		return commhook.BF16Compress(), nil
	case "noop":
		return commhook.Noop{}, nil
	case "powersgd", "batched-powersgd":
		o := commhook.DefaultPowerSGDOptions()
		o.MatrixApproximationRank, o.StartIter = c.powersgdRank, c.powersgdStartIter
		if c.hook == "powersgd" {
			return commhook.NewPowerSGD(o)
		}
		return commhook.NewBatchedPowerSGD(o)
	}
	return nil, fmt.Errorf("--hook %q: want one of %s", c.hook, strings.Join(hookNames, ", "))
}
