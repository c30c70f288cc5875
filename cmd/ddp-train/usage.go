package main

import (
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	ddp "github.com/goddp/ddp"
	"github.com/goddp/ddp/internal/cli"
)

// synopsis is what --help prints before the flags.
const synopsis = `Usage: ddp-train [flags]

ddp-train trains a Gorgonia model (an MLP or a CNN) data-parallel, as
PyTorch's DistributedDataParallel does: every rank holds a replica, and
gradients are averaged in buckets overlapped with backward. Run alone, it
starts --nproc worker processes on this machine and rendezvouses them over
loopback; started by an external launcher (torchrun, Slurm's srun, mpirun,
a Kubernetes PyTorchJob), it runs as one of that job's workers. It reads
.npy or MNIST files, or makes a synthetic set, checkpoints and resumes
exactly, and serves Prometheus metrics and Chrome traces. Exit codes: 0
success, 1 a failed run, 2 bad flags or bad input (a damaged checkpoint
too), 128+signal when stopped by SIGINT or SIGTERM.

Examples:
  ddp-train                                   2 workers over TCP on loopback, synthetic data
  ddp-train --backend local --nproc 4         4 goroutine ranks in one process
  ddp-train --data X.npy --labels y.npy --hidden 512,512 --epochs 3 --save out/
  ddp-train --data X.npy --labels y.npy --eval-data Xt.npy --eval-labels yt.npy --epochs 3
  ddp-train eval --init out/ --data Xt.npy --labels yt.npy --hidden 512,512   score a saved model
  ddp-train --model cnn --data train-images-idx3-ubyte --labels train-labels-idx1-ubyte --optimizer adam --lr 0.001
  ddp-train --steps 1000 --checkpoint ck/ --checkpoint-every 100 --checkpoint-keep 3
  ddp-train --steps 2000 --checkpoint ck/ --checkpoint-keep 3 --resume
  torchrun --nproc_per_node 2 --no_python ddp-train --steps 200
  ddp-train lighthouse --listen :29510 --min-replicas 2   fault tolerance's quorum service (GODDP_SECRET)

Flags:
`

// errVersion says --version was given and the version printed. It wraps
// flag.ErrHelp, on which ddp-train exits 0, as after --help.
var errVersion = fmt.Errorf("--version: %w", flag.ErrHelp)

// infoFlags are --help's synopsis and --version.
type infoFlags struct{ version bool }

func (f *infoFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&f.version, "version", false, "print ddp-train's version (module version, VCS revision) and exit")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), synopsis)
		cli.PrintDefaults(fs) // --flag, as the README writes them
	}
}

// done prints the version to standard output and returns errVersion
// when --version was given.
func (f *infoFlags) done() error {
	if !f.version {
		return nil
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(os.Stdout, versionLine(info))
	return errVersion
}

// versionLine is "ddp-train VERSION (MODULE[, source tree], vcs
// REVISION[, modified], GO)" from the binary's build information:
// VERSION is the module version the toolchain stamped (go install
// module@version does), or, in a build inside the source tree, which the
// toolchain stamps "(devel)", the version the source declares
// (ddp.Version). The VCS part is there when the build recorded one (go
// build in a git checkout does).
func versionLine(info *debug.BuildInfo) string {
	if info == nil {
		return "ddp-train " + ddp.Version + " (no build information)"
	}
	version := info.Main.Version
	details := []string{info.Main.Path}
	if version == "" || version == "(devel)" {
		version = ddp.Version
		details = append(details, "source tree")
	}
	if info.Main.Path == "" {
		details[0] = info.Path
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		vcs := settings["vcs"]
		if vcs == "" {
			vcs = "vcs"
		}
		d := vcs + " " + rev
		if t := settings["vcs.time"]; t != "" {
			d += " " + t
		}
		details = append(details, d)
		if settings["vcs.modified"] == "true" {
			details = append(details, "modified")
		}
	}
	details = append(details, info.GoVersion)
	return fmt.Sprintf("ddp-train %s (%s)", version, strings.Join(details, ", "))
}
