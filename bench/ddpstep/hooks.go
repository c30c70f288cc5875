package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/goddp/ddp/commhook"
)

// newHook builds --hook's hook for one rank (ddp-train's --comm-hook
// names). The PowerSGD hooks compress from iteration --powersgd-start-iter
// (default 2, so that the timed steps compress), with torch's other
// defaults.
func newHook(c config) (commhook.Hook, error) {
	if !slices.Contains(commhook.Names(), c.hook) {
		return nil, fmt.Errorf("--hook %q: want one of %s", c.hook, strings.Join(commhook.Names(), ", "))
	}
	o := commhook.DefaultPowerSGDOptions()
	o.MatrixApproximationRank, o.StartIter = c.powersgdRank, c.powersgdStartIter
	return commhook.ByName(c.hook, o)
}
