package env

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/goddp/ddp/pg"
)

// A world size above 65536, from any launcher, is refused with
// the variable named, before anything is sized by it.
func TestWorldSizeBounded(t *testing.T) {
	over := strconv.Itoa(65536 + 1)
	job := map[string]string{"MASTER_ADDR": "10.0.0.1", "GODDP_SECRET": hexSecret}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range job {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tt := range []struct {
		name string
		vars map[string]string
		want string
	}{
		{"WORLD_SIZE 2e9", with("RANK", "0", "WORLD_SIZE", "2000000000"),
			"WORLD_SIZE=2000000000 is more than the 65536 ranks"},
		{"WORLD_SIZE just over", with("RANK", "0", "WORLD_SIZE", over), "WORLD_SIZE=" + over + " is more than"},
		{"LOCAL_WORLD_SIZE 2e9", with("RANK", "0", "WORLD_SIZE", "2", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2000000000"),
			"LOCAL_WORLD_SIZE=2000000000 is more than"},
		{"OMPI_COMM_WORLD_SIZE 2e9", with("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "2000000000"),
			"OMPI_COMM_WORLD_SIZE=2000000000 is more than"},
		{"SLURM_NTASKS 2e9", srunTask(1, "SLURM_NTASKS", "2000000000"), "SLURM_NTASKS=2000000000 is more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromLookup(lookupOf(tt.vars))
			if !errors.Is(err, pg.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("FromLookup = %v, %v; want pg.ErrInvalidArgument saying %q", c, err, tt.want)
			}
		})
	}
}

// 65536 itself is a world size.
func TestLargestWorldSize(t *testing.T) {
	n := strconv.Itoa(65536)
	last := strconv.Itoa(65536 - 1)
	c, err := FromLookup(lookupOf(map[string]string{"RANK": last, "WORLD_SIZE": n, "MASTER_ADDR": "10.0.0.1",
		"GODDP_SECRET": hexSecret}))
	if err != nil || c.WorldSize != 65536 || c.Rank != 65536-1 {
		t.Fatalf("FromLookup = %v, %v", c, err)
	}
}
