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

// Slurm's node lists are compressed; the first host runs rank 0.
func ExampleExpandHostlist() {
	for _, list := range []string{"node[01-04,07]", "a1,b[2-3]", "rack[1-2]-gpu[8-9]", "node[3-1]"} {
		hosts, err := env.ExpandHostlist(list)
		fmt.Println(hosts, err)
	}
	// Output:
	// [node01 node02 node03 node04 node07] <nil>
	// [a1 b2 b3] <nil>
	// [rack1-gpu8 rack1-gpu9 rack2-gpu8 rack2-gpu9] <nil>
	// [] hostlist "node[3-1]": range "3-1" runs backwards
}

// A task of `srun -N2 --ntasks-per-node=2` needs nothing but Slurm's
// variables and the secret.
func ExampleFromLookup_slurm() {
	vars := map[string]string{
		"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4",
		"SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NODELIST": "gpu[07-08]",
		"SLURM_STEP_TASKS_PER_NODE": "2(x2)",
		"GODDP_SECRET":              "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
	}
	cfg, err := env.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	fmt.Println(cfg, err)

	delete(vars, "SLURM_NTASKS")
	_, err = env.FromLookup(func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	fmt.Println(err)
	// Output:
	// rank 3 of 4 (local 1 of 2) from slurm, store gpu07:14242, secret 32 bytes <nil>
	// invalid argument: env: SLURM_PROCID is set but SLURM_NTASKS is not, in a task of srun (SLURM_STEP_ID is set), which has both; do not unset it
}
