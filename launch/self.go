package launch

import (
	"context"
	"io"
	"os"
)

// Self starts n copies of the running program as the workers of a
// single-machine job, with the same arguments, the rendezvous environment
// of StandaloneEnv and marker ("NAME=1") so each copy knows it is a
// worker. It waits for them as Run does.
func Self(ctx context.Context, n int, args []string, marker string, stdout, stderr io.Writer) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	jobEnv, err := StandaloneEnv(n)
	if err != nil {
		return err
	}
	return Run(ctx, Spec{
		N:      n,
		Path:   self,
		Args:   args,
		Env:    append(append(os.Environ(), jobEnv...), marker),
		Stdout: stdout,
		Stderr: stderr,
	})
}
