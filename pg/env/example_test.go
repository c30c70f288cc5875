package env_test

import (
	"fmt"

	"github.com/goddp/ddp/pg/env"
)

// A program passes os.LookupEnv; here a map stands in for the environment
// torchrun gives rank 1 of a 2-process job on one machine.
func ExampleFromLookup() {
	vars := map[string]string{
		"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29400",
		"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
		"GODDP_SECRET": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
	}
	cfg, err := env.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	fmt.Println(cfg, err)
	fmt.Println(cfg.StoreAddr(), cfg.IsStoreHost())

	vars["RANK"] = "3"
	_, err = env.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	fmt.Println(err)
	// Output:
	// rank 1 of 2 (local 1 of 2) from torchrun, store 127.0.0.1:29400, secret 32 bytes <nil>
	// 127.0.0.1:29400 false
	// invalid argument: env: RANK=3 is not below WORLD_SIZE=2
}
