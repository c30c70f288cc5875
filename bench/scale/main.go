// Command scale predicts how a data-parallel job scales before a cluster
// is rented, and checks the prediction on network namespaces:
//
//	scale predict --timeline DIR --mlp 32,1024,1024,4 --ranks-per-host 8 --inter 25gbit --ranks 8,16,64,256,1024
//	scale predict --profile profile.json --cluster cluster.json
//	scale profile --timeline DIR --mlp 32,1024,1024,4 > profile.json
//	scale predict --synthetic params=44.5e6,forward=0.2,backward=0.4 --ranks-per-host 4 --inter 25gbit
//	scale predict --timeline DIR --ranks 4 --ranks-per-host 2 --inter 100mbit --diloco-sync-every 20,50,100
//	scale calibrate                                   # root: α and β of a netbed's links
//	scale validate --ddp-train /tmp/ddp-train --out DIR  # root: ddp-train on a netbed, predicted against measured
//	scale validate --analyze DIR                      # that table again, from DIR's record.json and traces
//
// predict reads one rank's compute profile: a JSON Profile (package
// bench/scale/scalemodel), or the Chrome traces ddp-train --timeline DIR
// writes, best from a run with --comm-hook noop on the hardware the job
// will have (the trace carries each bucket's ready time and bytes; --mlp
// gives the parameters' shapes, which only PowerSGD needs). It prints,
// for every world size, algorithm and comm hook, the predicted step
// time, communication time, the share of it hidden behind backward, and
// the weak-scaling efficiency (the compute-only step over the step).
// With --diloco-sync-every it predicts DiLoCo (package diloco) instead:
// the mean step, the bytes per step and the speedup over DDP.
// validate runs ddp-train on two network namespaces (internal/netbed)
// with rate-capped links, and prints, per configuration, the measured
// step time against the model's; calibrate measures the links' α and β
// with pg/tcp allreduces. docs/scaling.md states the model's assumptions,
// its validation table and its predictions for large clusters.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/goddp/ddp/internal/cli"
)

func main() { cli.Main("scale", run) }

// usage is what -h prints.
const usage = `Usage: scale SUBCOMMAND [flags]

Subcommands:
  predict    predict step times and scaling efficiency for world sizes, algorithms and comm hooks
  profile    write one rank's compute profile (JSON) from ddp-train --timeline traces
  validate   run ddp-train on a netbed of two network namespaces (root) and compare with predict
  calibrate  measure a netbed's links, α and β (root)

scale SUBCOMMAND -h lists the subcommand's flags; docs/scaling.md explains the model.
`

func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return cli.Usage(fmt.Errorf("want a subcommand: predict, profile, validate or calibrate"))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stderr, usage) // where the flag package prints a subcommand's
		return fmt.Errorf("scale: %w", flag.ErrHelp)
	case "predict":
		return runPredict(args[1:], stdout, stderr)
	case "profile":
		return runProfile(args[1:], stdout, stderr)
	case "validate":
		return runValidate(args[1:], stdout, stderr)
	case "calibrate":
		return runCalibrate(args[1:], stdout, stderr)
	case probeWorkerCmd:
		return runProbeWorker(args[1:], stdout, stderr)
	}
	return cli.Usage(fmt.Errorf("no subcommand %q: want predict, profile, validate or calibrate", args[0]))
}

// osEnviron is the environment children inherit.
func osEnviron() []string { return os.Environ() }
