package launch_test

import (
	"context"
	"fmt"
	"os"

	"github.com/goddp/ddp/internal/launch"
)

// Two workers of a shell command, each told its rank; rank 0's output is
// shown.
func ExampleRun() {
	env, err := launch.StandaloneEnv(2)
	if err != nil {
		fmt.Println(err)
		return
	}
	err = launch.Run(context.Background(), launch.Spec{
		N:      2,
		Path:   "/bin/sh",
		Args:   []string{"-c", `echo "rank $RANK of $WORLD_SIZE"`},
		Env:    env,
		Stdout: os.Stdout,
	})
	fmt.Println("error:", err)
	// Output:
	// rank 0 of 2
	// error: <nil>
}
