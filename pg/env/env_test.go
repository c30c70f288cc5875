package env

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

const hexSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

var decodedSecret = []byte{
	0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
	0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff,
}

func lookupOf(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

func TestFromLookup(t *testing.T) {
	tests := []struct {
		name       string
		vars       map[string]string
		want       Config
		storeAddr  string
		listenAddr string
	}{
		{
			name:      "no launcher",
			vars:      map[string]string{},
			want:      Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: SourceNone},
			storeAddr: "127.0.0.1:29500", listenAddr: "127.0.0.1:29500",
		},
		{
			name: "torchrun, single machine",
			vars: map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41000", "RANK": "3", "WORLD_SIZE": "4",
				"LOCAL_RANK": "3", "LOCAL_WORLD_SIZE": "4", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 3, WorldSize: 4, LocalRank: 3, LocalWorldSize: 4, MasterAddr: "127.0.0.1", MasterPort: 41000,
				Secret: decodedSecret, Source: SourceTorchrun},
			storeAddr: "127.0.0.1:41000", listenAddr: "127.0.0.1:41000",
		},
		{
			name: "torchrun's agent store",
			vars: map[string]string{"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "0", "WORLD_SIZE": "2",
				"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": "0",
				"ROLE_NAME": "default", "ROLE_WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "GODDP_SECRET": hexSecret,
				"TORCHELASTIC_ERROR_FILE":      "/tmp/tr/none_3oq28v46/attempt_0/0/error.json",
				"TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "none", "TORCHELASTIC_RESTART_COUNT": "2",
				"TORCHELASTIC_MAX_RESTARTS": "3"},
			want: Config{Rank: 0, WorldSize: 2, LocalRank: 0, LocalWorldSize: 2, MasterAddr: "127.0.0.1", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceTorchrun, UseAgentStore: true, RunID: "none", RestartCount: 2, MaxRestarts: 3},
			storeAddr: "127.0.0.1:29500", listenAddr: "127.0.0.1:29500",
		},
		{
			name: "PyTorchJob without torchrun",
			vars: map[string]string{"MASTER_ADDR": "train-master-0", "MASTER_PORT": "23456", "RANK": "0", "WORLD_SIZE": "8",
				"GODDP_SECRET": "a raw pass phrase, not hex"},
			want: Config{Rank: 0, WorldSize: 8, LocalRank: 0, LocalWorldSize: 1, MasterAddr: "train-master-0", MasterPort: 23456,
				Secret: []byte("a raw pass phrase, not hex"), Source: SourceTorchrun},
			storeAddr: "train-master-0:23456", listenAddr: ":23456",
		},
		{
			name: "mpirun, default port",
			vars: map[string]string{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "10.0.0.7", "GODDP_SECRET": " " + hexSecret + "\n"},
			want: Config{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "10.0.0.7", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceMPI},
			storeAddr: "10.0.0.7:29500", listenAddr: ":29500",
		},
		{
			name: "mpirun exporting agreeing torch variables",
			vars: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "RANK": "1", "WORLD_SIZE": "2",
				"MASTER_ADDR": "localhost", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 1, WorldSize: 2, LocalWorldSize: 1, MasterAddr: "localhost", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceTorchrun},
			storeAddr: "localhost:29500", listenAddr: "localhost:29500",
		},
		{
			name: "IPv6 master in brackets",
			vars: map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[::1]", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 0, WorldSize: 2, LocalWorldSize: 1, MasterAddr: "::1", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceTorchrun},
			storeAddr: "[::1]:29500", listenAddr: "[::1]:29500",
		},
		{
			name: "short hex is taken as text",
			vars: map[string]string{"GODDP_SECRET": "0123456789abcdef"},
			want: Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500,
				Secret: []byte("0123456789abcdef"), Source: SourceNone},
			storeAddr: "127.0.0.1:29500", listenAddr: "127.0.0.1:29500",
		},
		{
			name: "Kubeflow Trainer v2 (TrainJob), one process per node",
			vars: map[string]string{"PET_NNODES": "4", "PET_NPROC_PER_NODE": "1", "PET_NODE_RANK": "2",
				"PET_MASTER_ADDR": "train-node-0-0.train", "PET_MASTER_PORT": "29400", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 2, WorldSize: 4, LocalRank: 0, LocalWorldSize: 1, GroupRank: 2,
				MasterAddr: "train-node-0-0.train",
				MasterPort: 29400, Secret: decodedSecret, Source: SourceKubeflow},
			storeAddr: "train-node-0-0.train:29400", listenAddr: ":29400",
		},
		{
			name: "Kubeflow Trainer v2 with MASTER_ set by hand",
			vars: map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "a", "PET_MASTER_PORT": "1",
				"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "41001", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 0, WorldSize: 2, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 41001,
				Secret: decodedSecret, Source: SourceKubeflow},
			storeAddr: "127.0.0.1:41001", listenAddr: "127.0.0.1:41001",
		},
		{
			name: "torchrun inside a TrainJob pod: torchrun's RANK wins",
			vars: map[string]string{"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1", "RANK": "3",
				"WORLD_SIZE": "4",
				"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "m", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "m", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceTorchrun},
			storeAddr: "m:29500", listenAddr: ":29500",
		},
		{
			name: "Indexed Job or JobSet: JOB_COMPLETION_INDEX is the rank",
			vars: map[string]string{"JOB_COMPLETION_INDEX": "1", "WORLD_SIZE": "3", "MASTER_ADDR": "ddp-0.ddp",
				"MASTER_PORT": "29500", "GODDP_SECRET": hexSecret},
			want: Config{Rank: 1, WorldSize: 3, LocalWorldSize: 1, MasterAddr: "ddp-0.ddp", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceIndexed},
			storeAddr: "ddp-0.ddp:29500", listenAddr: ":29500",
		},
		{
			name: "an Indexed Job's RANK set by hand wins over the index",
			vars: map[string]string{"JOB_COMPLETION_INDEX": "1", "RANK": "0", "WORLD_SIZE": "3", "MASTER_ADDR": "ddp-0.ddp",
				"GODDP_SECRET": hexSecret},
			want: Config{Rank: 0, WorldSize: 3, LocalWorldSize: 1, MasterAddr: "ddp-0.ddp", MasterPort: 29500,
				Secret: decodedSecret, Source: SourceTorchrun},
			storeAddr: "ddp-0.ddp:29500", listenAddr: ":29500",
		},
		{
			name:      "empty values count as unset",
			vars:      map[string]string{"RANK": "", "WORLD_SIZE": "", "MASTER_PORT": ""},
			want:      Config{WorldSize: 1, LocalWorldSize: 1, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: SourceNone},
			storeAddr: "127.0.0.1:29500", listenAddr: "127.0.0.1:29500",
		},
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
			if a := got.StoreAddr(); a != tt.storeAddr {
				t.Errorf("StoreAddr = %q, want %q", a, tt.storeAddr)
			}
			if a := got.StoreListenAddr(); a != tt.listenAddr {
				t.Errorf("StoreListenAddr = %q, want %q", a, tt.listenAddr)
			}
			if got.IsStoreHost() != (tt.want.Rank == 0 && !tt.want.UseAgentStore) {
				t.Errorf("IsStoreHost = %v for rank %d", got.IsStoreHost(), got.Rank)
			}
		})
	}
}

func TestFromLookupErrors(t *testing.T) {
	job := func(extra ...string) map[string]string {
		m := map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500",
			"GODDP_SECRET": hexSecret}
		for i := 0; i < len(extra); i += 2 {
			if extra[i+1] == "<unset>" {
				delete(m, extra[i])
			} else {
				m[extra[i]] = extra[i+1]
			}
		}
		return m
	}
	tests := []struct {
		name string
		vars map[string]string
		want string // in the message
	}{
		{"rank too big", job("RANK", "3"), "RANK=3 is not below WORLD_SIZE=2"},
		{"rank negative", job("RANK", "-1"), "RANK=-1 is not below WORLD_SIZE=2"},
		{"world size zero", job("RANK", "0", "WORLD_SIZE", "0"), "WORLD_SIZE=0 must be at least 1"},
		{"rank not a number", job("RANK", "one"), `RANK="one" is not an integer`},
		{"rank without world size", job("WORLD_SIZE", "<unset>"), "RANK is set but WORLD_SIZE is not"},
		{"world size without rank", job("RANK", "<unset>"), "WORLD_SIZE is set but RANK is not"},
		{"local rank alone", job("LOCAL_RANK", "0"), "LOCAL_RANK is set but LOCAL_WORLD_SIZE is not"},
		{"local rank too big", job("LOCAL_RANK", "2", "LOCAL_WORLD_SIZE", "2"),
			"LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
		{"local world too big", job("LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "3"),
			"LOCAL_WORLD_SIZE=3 exceeds the world size 2"},
		{"local without rank", map[string]string{"LOCAL_RANK": "0"},
			"LOCAL_RANK is set but no launcher variables say this process's rank"},
		{"mpi half set", map[string]string{"OMPI_COMM_WORLD_RANK": "0"},
			"OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not"},
		{"mpi local too big",
			map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_LOCAL_RANK": "4",
				"OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_ADDR": "h", "GODDP_SECRET": hexSecret},
			"OMPI_COMM_WORLD_LOCAL_RANK=4 is not below"},
		{"torch and mpi disagree", job("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2"),
			"disagree with OMPI_COMM_WORLD_RANK=0"},
		{"no master address", job("MASTER_ADDR", "<unset>"), "MASTER_PORT is set but MASTER_ADDR is not"},
		{"no master address nor port", job("MASTER_ADDR", "<unset>", "MASTER_PORT", "<unset>"), "MASTER_ADDR is not set"},
		{"port in master address", job("MASTER_ADDR", "10.0.0.1:29500"), "put the port in MASTER_PORT"},
		{"URL as master address", job("MASTER_ADDR", "tcp://10.0.0.1"), "is not a host name or IP address"},
		{"port out of range", job("MASTER_PORT", "70000"), "MASTER_PORT=70000 is not a TCP port"},
		{"port zero", job("MASTER_PORT", "0"), "MASTER_PORT=0 is not a TCP port"},
		{"port not a number", job("MASTER_PORT", "http"), `MASTER_PORT="http" is not an integer`},
		{"no secret", job("GODDP_SECRET", "<unset>"), "GODDP_SECRET is not set"},
		{"short secret", job("GODDP_SECRET", "hunter2"), "GODDP_SECRET is 7 bytes; it must be at least 16"},
		{"short secret alone", map[string]string{"GODDP_SECRET": "tiny"}, "GODDP_SECRET is 4 bytes"},
		{"PET node rank alone", map[string]string{"PET_NODE_RANK": "0"}, "PET_NODE_RANK is set but PET_NNODES is not"},
		{"PET several processes per pod",
			map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "4"},
			"make torchrun the container's command"},
		{"PET auto processes", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "2", "PET_NPROC_PER_NODE": "auto"},
			"run the program under torchrun"},
		{"PET node rank too big", map[string]string{"PET_NODE_RANK": "2", "PET_NNODES": "2"},
			"PET_NODE_RANK=2 is not below PET_NNODES=2"},
		{"PET without a master", map[string]string{"PET_NODE_RANK": "0", "PET_NNODES": "2", "GODDP_SECRET": hexSecret},
			"MASTER_ADDR is not set"},
		{"PET master alone", map[string]string{"PET_MASTER_ADDR": "m"}, "PET_MASTER_ADDR is set but no launcher variables"},
		{"completion index too big",
			map[string]string{"JOB_COMPLETION_INDEX": "3", "WORLD_SIZE": "3", "MASTER_ADDR": "m", "GODDP_SECRET": hexSecret},
			"RANK=3 is not below WORLD_SIZE=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromLookup(lookupOf(tt.vars))
			if !errors.Is(err, pg.ErrInvalidArgument) {
				t.Fatalf("FromLookup = %v, %v; want an error wrapping pg.ErrInvalidArgument", c, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
			if s := tt.vars["GODDP_SECRET"]; s != "" && strings.Contains(err.Error(), s) {
				t.Fatalf("error %q reveals the secret", err)
			}
		})
	}
}

func TestFromLookupNil(t *testing.T) {
	if _, err := FromLookup(nil); !errors.Is(err, pg.ErrInvalidArgument) {
		t.Fatalf("err = %v; want pg.ErrInvalidArgument", err)
	}
}

func TestConfigStringHidesSecret(t *testing.T) {
	c, err := FromLookup(lookupOf(map[string]string{"GODDP_SECRET": "correct horse battery staple"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v", c)} {
		if strings.Contains(s, "horse") || !strings.Contains(s, "28 bytes") {
			t.Fatalf("%q: want the secret's length, not the secret", s)
		}
	}
	if !bytes.Equal(c.Secret, []byte("correct horse battery staple")) {
		t.Fatalf("Secret = %q", c.Secret)
	}
}

func TestAgentPrefix(t *testing.T) {
	for _, tc := range []struct {
		e    Config
		want string
	}{
		{Config{}, "goddp/none/0"},
		{Config{RunID: "job-7", RestartCount: 3}, "goddp/job-7/3"},
		{Config{RunID: "3f2a", RestartCount: 0}, "goddp/3f2a/0"},
	} {
		if got := tc.e.AgentPrefix(); got != tc.want {
			t.Errorf("AgentPrefix(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
