package env

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// srunTask is the environment srun gives task rank of a 4-task step on
// two nodes (two tasks each), as in `srun -N2 --ntasks-per-node=2`,
// with the changes in kv ("<unset>" removes a variable).
func srunTask(rank int, kv ...string) map[string]string {
	m := map[string]string{
		"SLURM_JOB_ID": "4242", "SLURM_JOBID": "4242", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0",
		"SLURM_PROCID": itoa(rank), "SLURM_NTASKS": "4", "SLURM_NPROCS": "4", "SLURM_LOCALID": itoa(rank % 2),
		"SLURM_NODEID": itoa(rank / 2), "SLURM_NNODES": "2", "SLURM_STEP_NUM_TASKS": "4",
		"SLURM_JOB_NODELIST": "gpu[07-08],login1", "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_NODELIST": "gpu[07-08],login1",
		"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_TASKS_PER_NODE": "2(x2),1",
		"GODDP_SECRET": hexSecret,
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "<unset>" {
			delete(m, kv[i])
		} else {
			m[kv[i]] = kv[i+1]
		}
	}
	return m
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestSlurm(t *testing.T) {
	tests := []struct {
		name string
		vars map[string]string
		want Config
	}{
		{"rank 0", srunTask(0), Config{Rank: 0, WorldSize: 4, LocalRank: 0, LocalWorldSize: 2, GroupRank: 0,
			MasterAddr: "gpu07", MasterPort: 10000 + 4242, Secret: decodedSecret, Source: SourceSlurm}},
		{"rank 3", srunTask(3), Config{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, GroupRank: 1,
			MasterAddr: "gpu07", MasterPort: 14242, Secret: decodedSecret, Source: SourceSlurm}},
		{"MASTER_ADDR and MASTER_PORT win", srunTask(1, "MASTER_ADDR", "10.1.2.3", "MASTER_PORT", "23456"),
			Config{Rank: 1, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "10.1.2.3", MasterPort: 23456,
				Secret: decodedSecret, Source: SourceSlurm}},
		{"job node list when the step's is unset",
			srunTask(2, "SLURM_STEP_NODELIST", "<unset>", "SLURM_JOB_NODELIST", "n[3-4]"),
			Config{Rank: 2, WorldSize: 4, LocalRank: 0, LocalWorldSize: 2, GroupRank: 1, MasterAddr: "n3", MasterPort: 14242,
				Secret: decodedSecret, Source: SourceSlurm}},
		{"large job id", srunTask(0, "SLURM_JOB_ID", "1234567"), Config{Rank: 0, WorldSize: 4, LocalWorldSize: 2,
			MasterAddr: "gpu07", MasterPort: 10000 + 1234567%20000, Secret: decodedSecret, Source: SourceSlurm}},
		{"uneven tasks per node", srunTask(2, "SLURM_NTASKS", "3", "SLURM_STEP_TASKS_PER_NODE", "2,1", "SLURM_LOCALID", "0"),
			Config{Rank: 2, WorldSize: 3, LocalRank: 0, LocalWorldSize: 1, GroupRank: 1, MasterAddr: "gpu07", MasterPort: 14242,
				Secret: decodedSecret, Source: SourceSlurm}},
		{"tasks per node from the node list",
			srunTask(3, "SLURM_STEP_TASKS_PER_NODE", "<unset>", "SLURM_TASKS_PER_NODE", "<unset>"),
			Config{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, GroupRank: 1, MasterAddr: "gpu07", MasterPort: 14242,
				Secret: decodedSecret, Source: SourceSlurm}},
		// Nested launchers: the innermost wins, without a conflict.
		{"torchrun under srun", srunTask(1, "RANK", "5", "WORLD_SIZE", "8", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "4",
			"GROUP_RANK", "1", "TORCHELASTIC_RUN_ID", "j1", "TORCHELASTIC_USE_AGENT_STORE", "True", "MASTER_ADDR", "gpu07",
			"MASTER_PORT", "29500"),
			Config{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, GroupRank: 1, MasterAddr: "gpu07", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceTorchrun, UseAgentStore: true, RunID: "j1"}},
		{"mpirun in an allocation",
			srunTask(1, "OMPI_COMM_WORLD_RANK", "6", "OMPI_COMM_WORLD_SIZE", "8", "MASTER_ADDR", "gpu07"),
			Config{Rank: 6, WorldSize: 8, LocalWorldSize: 1, MasterAddr: "gpu07", MasterPort: 29500, Secret: decodedSecret,
				Source: SourceMPI}},
		{"RANK and WORLD_SIZE agreeing with Slurm", srunTask(3, "RANK", "3", "WORLD_SIZE", "4", "MASTER_ADDR", "gpu07"),
			Config{Rank: 3, WorldSize: 4, LocalWorldSize: 1, MasterAddr: "gpu07", MasterPort: 29500, Secret: decodedSecret,
				Source: SourceTorchrun}},
		// Not a job of several ranks: the program is the whole job.
		{"one-task step", srunTask(0, "SLURM_NTASKS", "1", "SLURM_STEP_TASKS_PER_NODE", "1"),
			Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Secret: decodedSecret,
				Source: SourceNone}},
		{"batch script of one task", srunTask(0, "SLURM_STEP_ID", "<unset>", "SLURM_STEPID", "<unset>", "SLURM_NTASKS", "1"),
			Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Secret: decodedSecret,
				Source: SourceNone}},
		{"allocation shell", map[string]string{"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n[1-2]"},
			Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: SourceNone}},
		{"ddp-train's own workers in a one-task step", srunTask(0, "SLURM_NTASKS", "1", "RANK", "1", "WORLD_SIZE", "2",
			"LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "40000"),
			Config{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 40000,
				Secret: decodedSecret, Source: SourceTorchrun}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FromLookup(lookupOf(tt.vars))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

// Every task of a step agrees on the master and the port, and the ranks
// are a permutation of 0..n-1 with consistent local ranks.
func TestSlurmTasksAgree(t *testing.T) {
	seen := map[int]bool{}
	var store string
	for r := range 4 {
		c, err := FromLookup(lookupOf(srunTask(r)))
		if err != nil {
			t.Fatal(err)
		}
		if store == "" {
			store = c.StoreAddr()
		}
		if c.StoreAddr() != store || c.StoreAddr() != "gpu07:14242" {
			t.Fatalf("task %d: store %s, task 0: %s", r, c.StoreAddr(), store)
		}
		if c.IsStoreHost() != (r == 0) || c.StoreListenAddr() != ":14242" {
			t.Fatalf("task %d: IsStoreHost %v, listen %q", r, c.IsStoreHost(), c.StoreListenAddr())
		}
		if seen[c.Rank] || c.GroupRank*c.LocalWorldSize+c.LocalRank != c.Rank {
			t.Fatalf("task %d: %v", r, c)
		}
		seen[c.Rank] = true
	}
}

// The refusals: a launcher's environment that is cut short or that
// contradicts another is an error naming the variable, never a job of
// one process.
func TestPartialOrConflicting(t *testing.T) {
	torch := func(kv ...string) map[string]string {
		m := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "GROUP_RANK": "0", "ROLE_RANK": "1", "ROLE_WORLD_SIZE": "2",
			"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "0",
			"TORCHELASTIC_MAX_RESTARTS": "0", "GODDP_SECRET": hexSecret}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	mpi := func(kv ...string) map[string]string {
		m := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
			"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "n1", "GODDP_SECRET": hexSecret}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<unset>" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	type tc struct {
		name string
		vars map[string]string
		want []string // every one in the message
	}
	var tests []tc
	// torchrun's worker environment with each variable taken away.
	for name, want := range map[string]string{
		"RANK":                         "WORLD_SIZE is set but RANK is not",
		"WORLD_SIZE":                   "RANK is set but WORLD_SIZE is not",
		"LOCAL_RANK":                   "LOCAL_WORLD_SIZE is set but LOCAL_RANK is not",
		"LOCAL_WORLD_SIZE":             "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not",
		"MASTER_ADDR":                  "TORCHELASTIC_USE_AGENT_STORE is set but MASTER_ADDR is not",
		"MASTER_PORT":                  "TORCHELASTIC_USE_AGENT_STORE is set but MASTER_PORT is not",
		"GODDP_SECRET":                 "GODDP_SECRET is not set",
		"TORCHELASTIC_USE_AGENT_STORE": "", // the others still say torchrun: a valid job without the agent's store
	} {
		if want == "" {
			if _, err := FromLookup(lookupOf(torch(name, "<unset>"))); err != nil {
				t.Errorf("torchrun without %s: %v", name, err)
			}
			continue
		}
		tests = append(tests, tc{"torchrun without " + name, torch(name, "<unset>"), []string{want}})
	}
	// RANK and WORLD_SIZE both gone, the agent's variables left: no local job.
	tests = append(tests, tc{"torchrun's agent variables alone", torch("RANK", "<unset>", "WORLD_SIZE", "<unset>"),
		[]string{"is set, as torchrun sets it on its workers, but RANK and WORLD_SIZE are not"}})
	for _, name := range torchrunAgentVars {
		tests = append(tests,
			tc{name + " alone", map[string]string{name: "1"}, []string{name + " is set, as torchrun sets it", "unset " + name}})
	}
	// Variables of a job of several ranks, without a rank.
	for _, name := range partialVars {
		tests = append(tests, tc{name + " alone", map[string]string{name: "1"},
			[]string{name + " is set but no launcher variables say this process's rank", "unset " + name}})
	}
	// Open MPI's environment with each variable taken away.
	for name, want := range map[string]string{
		"OMPI_COMM_WORLD_RANK":       "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not",
		"OMPI_COMM_WORLD_SIZE":       "OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not",
		"OMPI_COMM_WORLD_LOCAL_RANK": "OMPI_COMM_WORLD_LOCAL_SIZE is set but OMPI_COMM_WORLD_LOCAL_RANK is not",
		"OMPI_COMM_WORLD_LOCAL_SIZE": "OMPI_COMM_WORLD_LOCAL_RANK is set but OMPI_COMM_WORLD_LOCAL_SIZE is not",
		"MASTER_ADDR":                "MASTER_ADDR is not set",
		"GODDP_SECRET":               "GODDP_SECRET is not set",
	} {
		tests = append(tests, tc{"mpirun without " + name, mpi(name, "<unset>"), []string{want}})
	}
	// srun's task environment with each variable taken away.
	for name, want := range map[string][]string{
		"SLURM_PROCID":  {"SLURM_NTASKS is set but SLURM_PROCID is not"},
		"SLURM_NTASKS":  {"SLURM_PROCID is set but SLURM_NTASKS is not"},
		"SLURM_LOCALID": {"SLURM_LOCALID is not set", "SLURM_PROCID=1 and SLURM_NTASKS=4"},
		"SLURM_NODEID":  {"SLURM_NODEID is not set"},
		"GODDP_SECRET":  {"GODDP_SECRET is not set"},
	} {
		tests = append(tests, tc{"srun without " + name, srunTask(1, name, "<unset>"), want})
	}
	tests = append(tests,
		tc{"srun without a node list",
			srunTask(1, "SLURM_STEP_NODELIST", "<unset>", "SLURM_JOB_NODELIST", "<unset>", "SLURM_NODELIST", "<unset>"),
			[]string{"MASTER_ADDR is not set and neither is SLURM_STEP_NODELIST or SLURM_JOB_NODELIST"}},
		tc{"srun without a job id", srunTask(1, "SLURM_JOB_ID", "<unset>", "SLURM_JOBID", "<unset>"),
			[]string{"MASTER_PORT is not set and neither is SLURM_JOB_ID"}},
		tc{"srun without any rank", srunTask(1, "SLURM_PROCID", "<unset>", "SLURM_NTASKS", "<unset>"),
			[]string{"SLURM_STEP_ID is set but SLURM_PROCID and SLURM_NTASKS are not"}},
		tc{"srun without tasks per node, uneven",
			srunTask(1, "SLURM_STEP_TASKS_PER_NODE", "<unset>", "SLURM_TASKS_PER_NODE", "<unset>", "SLURM_NTASKS", "3"),
			[]string{"SLURM_STEP_TASKS_PER_NODE is not set"}},
		tc{"malformed node list", srunTask(1, "SLURM_STEP_NODELIST", "gpu[07-"),
			[]string{"SLURM_STEP_NODELIST", `"gpu[07-"`, "not closed"}},
		tc{"malformed job id", srunTask(1, "SLURM_JOB_ID", "4242_7"), []string{`SLURM_JOB_ID="4242_7" is not a job id`}},
		tc{"malformed tasks per node", srunTask(1, "SLURM_STEP_TASKS_PER_NODE", "2(x"),
			[]string{"SLURM_STEP_TASKS_PER_NODE"}},
		tc{"local id too big", srunTask(1, "SLURM_LOCALID", "2"),
			[]string{"SLURM_LOCALID=2 is not below the 2 tasks on node 0"}},
		tc{"node id too big", srunTask(1, "SLURM_NODEID", "2"), []string{"SLURM_NODEID=2 is not below the 2 nodes"}},
		tc{"procid too big", srunTask(1, "SLURM_PROCID", "4"), []string{"SLURM_PROCID=4 is not below SLURM_NTASKS=4"}},
		tc{"batch script of several tasks", srunTask(0, "SLURM_STEP_ID", "<unset>", "SLURM_STEPID", "<unset>"),
			[]string{"SLURM_NTASKS=4 and SLURM_PROCID=0 are set but SLURM_STEP_ID is not", "srun"}},
		tc{"LOCAL_RANK under Slurm", srunTask(1, "LOCAL_RANK", "1"),
			[]string{"LOCAL_RANK is set but RANK and WORLD_SIZE are not"}},
		// Conflicts between launchers that are peers, not nested.
		tc{"RANK exported in the batch script", srunTask(3, "RANK", "0", "WORLD_SIZE", "4", "MASTER_ADDR", "gpu07"),
			[]string{"RANK=0 and WORLD_SIZE=4 disagree with Slurm's SLURM_PROCID=3 and SLURM_NTASKS=4"}},
		tc{"WORLD_SIZE disagrees with Slurm", srunTask(3, "RANK", "3", "WORLD_SIZE", "8", "MASTER_ADDR", "gpu07"),
			[]string{"WORLD_SIZE=8 disagree with Slurm's SLURM_PROCID=3 and SLURM_NTASKS=4"}},
		tc{"RANK disagrees with Open MPI", mpi("RANK", "0", "WORLD_SIZE", "2"),
			[]string{"RANK=0 and WORLD_SIZE=2 disagree with OMPI_COMM_WORLD_RANK=1 and OMPI_COMM_WORLD_SIZE=2"}},
		tc{"torchrun's agent variables malformed", torch("TORCHELASTIC_USE_AGENT_STORE", "yes please"),
			[]string{`TORCHELASTIC_USE_AGENT_STORE="yes please" is not a boolean`}},
		tc{"restart count not a number", torch("TORCHELASTIC_RESTART_COUNT", "x"),
			[]string{`TORCHELASTIC_RESTART_COUNT="x" is not an integer`}},
		tc{"restart count negative", torch("TORCHELASTIC_RESTART_COUNT", "-1"),
			[]string{"TORCHELASTIC_RESTART_COUNT=-1 must not be negative"}},
		tc{"restarts beyond the maximum", torch("TORCHELASTIC_RESTART_COUNT", "4", "TORCHELASTIC_MAX_RESTARTS", "3"),
			[]string{"TORCHELASTIC_RESTART_COUNT=4 exceeds TORCHELASTIC_MAX_RESTARTS=3"}},
	)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromLookup(lookupOf(tt.vars))
			if !errors.Is(err, pg.ErrInvalidArgument) {
				t.Fatalf("FromLookup = %v, %v; want an error wrapping pg.ErrInvalidArgument", c, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
