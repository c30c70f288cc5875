package commhook

import (
	"fmt"
	"strings"
)

// Names lists the built-in hooks ByName builds, by the names ddp-train's
// --comm-hook takes (PyTorch's DDPCommHookType, in Go spelling).
func Names() []string {
	return []string{"allreduce", "fp16", "bf16", "powersgd", "batched-powersgd", "noop", "adasum", "hierarchical"}
}

// ByName returns a new built-in hook. The PowerSGD variants are built with
// o (DefaultPowerSGDOptions for torch's defaults); the others ignore it.
// Every call returns a new hook, since a stateful hook holds one rank's
// state.
func ByName(name string, o PowerSGDOptions) (Hook, error) {
	switch name {
	case "allreduce":
		return Allreduce{}, nil
	case "fp16":
		return FP16Compress(), nil
	case "bf16":
		return BF16Compress(), nil
	case "noop":
		return Noop{}, nil
	case "powersgd":
		return NewPowerSGD(o)
	case "batched-powersgd":
		return NewBatchedPowerSGD(o)
	case "adasum":
		return NewAdasum(), nil
	case "hierarchical": // hosts by os.Hostname; NewHierarchical takes a layout
		return NewHierarchical(HierarchicalOptions{})
	}
	return nil, fmt.Errorf("commhook: no built-in hook %q; want one of %s", name, strings.Join(Names(), ", "))
}
