package launch_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/goddp/ddp/launch"
)

// A program that launches itself: Self starts two copies of the running
// program (here the test binary, whose TestMain takes the worker's side
// when it finds the marker) and waits for them. Each copy joins the job
// with dist.InitProcessGroup and no options, and they sum their ranks + 1;
// rank 0's output is shown.
func ExampleSelf() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := launch.Self(ctx, 2, nil, "GODDP_LAUNCH_TEST_WORKER=sum", os.Stdout, os.Stderr)
	fmt.Println("error:", err)
	// Output:
	// rank 0 of 2: sum 3
	// error: <nil>
}

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

// A job whose rank 1 fails in the first attempt, restarted once: every
// worker starts again, with a fresh rendezvous.
func ExampleRunElastic() {
	err := launch.RunElastic(context.Background(), launch.Elastic{MaxRestarts: 2}, func(attempt int) (launch.Spec, error) {
		env, err := launch.StandaloneEnv(2)
		return launch.Spec{
			N:    2,
			Path: "/bin/sh",
			Args: []string{"-c", `if [ "$ATTEMPT" = 0 ]; then [ "$RANK" = 1 ] && exit 3; sleep 10; fi; echo "attempt ` +
				`$ATTEMPT: rank $RANK of $WORLD_SIZE"`},
			Env:    append(env, fmt.Sprintf("ATTEMPT=%d", attempt)),
			Stdout: os.Stdout,
		}, err
	})
	fmt.Println("error:", err)
	// Output:
	// attempt 1: rank 0 of 2
	// error: <nil>
}
