package main

import (
	"flag"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/graph"
)

// gomlxFlags are the flags only --engine gomlx acts on.
type gomlxFlags struct {
	dropout        float64 // --dropout
	mixedPrecision string  // --mixed-precision: "", bfloat16 or float16
	reduceDtype    string  // --reduce-dtype: the buckets' dtype under --mixed-precision
	gomlxPrograms  string  // --gomlx-programs: one, or per-layer (Note [backward in several programs])
}

func (f *gomlxFlags) register(fs *flag.FlagSet, engine *string) {
	fs.StringVar(engine, "engine", "gorgonia", "autodiff engine: gorgonia, or gomlx (GoMLX on its pure-Go simplego "+
		"backend; docs/gomlx.md)")
	fs.Float64Var(&f.dropout, "dropout", 0, "--engine gomlx: dropout probability after each hidden activation in "+
		"training (torch's inverted dropout; each rank draws its own masks from --seed, its rank and the micro-batch)")
	fs.StringVar(&f.mixedPrecision, "mixed-precision", "", "--engine gomlx: compute the gradients in bfloat16 and "+
		"reduce them (torch DDP's mixed_precision param_dtype), keeping --dtype master parameters and optimizer state")
	fs.StringVar(&f.reduceDtype, "reduce-dtype", "", "--engine gomlx with --mixed-precision: the dtype the buckets are "+
		"reduced in (mixed_precision's reduce_dtype): bfloat16, float16, float32 or float64; default the compute dtype")
	fs.StringVar(&f.gomlxPrograms, "gomlx-programs", "one", "--engine gomlx: one program per micro-batch, or per-layer "+
		"(the MLP's backward as one program per layer, each layer's gradients reduced while the next computes)")
}

// gomlxRefused are the flags --engine gomlx refuses, with why.
func gomlxRefused() map[string]string {
	return map[string]string{
		"find-unused-parameters": "the GoMLX program differentiates every parameter at every step, so none is unused",
		"static-graph":           "it tunes Gorgonia's hooks; the GoMLX program reports every gradient at once",
		"fault-tolerant": "--fault-tolerant's replica loop runs Gorgonia's tape (ftworker.go); it is not built for " +
			"--engine gomlx yet",
		"ft-replay": "--ft-replay replays on Gorgonia's tape; it is not built for --engine gomlx yet",
	}
}

// validateEngine checks --engine and what --engine gomlx can run.
func (c config) validateEngine() error {
	switch c.engine {
	case "gorgonia":
		for _, name := range []string{"dropout", "mixed-precision", "reduce-dtype", "gomlx-programs"} {
			if c.given(name) {
				return usagef("--%s needs --engine gomlx: Gorgonia v0.9.18 has no half-precision dtype and no seeded "+
					"per-rank dropout (docs/gomlx.md)", name)
			}
		}
		return nil
	case "gomlx":
	default:
		return usagef("--engine %q: want gorgonia or gomlx", c.engine)
	}
	refused := gomlxRefused()
	for _, name := range c.setFlags {
		if why, ok := refused[name]; ok {
			return usagef("--%s is not supported with --engine gomlx: %s", name, why)
		}
	}
	switch {
	case c.backend == "nccl":
		return usagef("--engine gomlx runs on the CPU (simplego): use --backend tcp, local or mpi")
	case c.dropout < 0 || c.dropout >= 1:
		return usagef("--dropout %v: want a probability in [0, 1)", c.dropout)
	case c.mixedPrecision == "float16":
		return usagef("--mixed-precision float16: GoMLX's simplego backend (v0.26.0) has no float16 arithmetic; use " +
			"bfloat16")
	case c.mixedPrecision != "" && c.mixedPrecision != "bfloat16":
		return usagef("--mixed-precision %q: want bfloat16", c.mixedPrecision)
	case c.reduceDtype != "" && c.mixedPrecision == "":
		return usagef("--reduce-dtype needs --mixed-precision")
	case c.reduceDtype != "" && !slices.Contains([]string{"bfloat16", "float16", "float32", "float64"}, c.reduceDtype):
		return usagef("--reduce-dtype %q: want bfloat16, float16, float32 or float64", c.reduceDtype)
	case c.gomlxPrograms != "one" && c.gomlxPrograms != "per-layer":
		return usagef("--gomlx-programs %q: want one or per-layer", c.gomlxPrograms)
	case c.gomlxPrograms == "per-layer" && c.model != "mlp":
		return usagef("--gomlx-programs per-layer splits the MLP's backward; --model %s runs as one program", c.model)
	case c.mixedPrecision != "" && c.given("comm-hook"):
		return usagef("--comm-hook with --mixed-precision: mixed precision reduces through its own hook (torch's " +
			"mixed_precision does too); leave --comm-hook out")
	}
	return nil
}

func activate(x *graph.Node, name string) *graph.Node {
	if strings.EqualFold(name, "tanh") {
		return graph.Tanh(x)
	}
	return graph.Max(x, graph.ZerosLike(x)) // relu
}
