package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/pg/flight"
)

// writeDumps writes dumps to dir as the ranks' flight-recorder files and
// returns their size in bytes.
func writeDumps(t *testing.T, dir string, dumps map[int]flight.Dump) int {
	t.Helper()
	total := 0
	for r, d := range dumps {
		b, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, flight.DefaultPrefix+strconv.Itoa(r)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	return total
}

// wideDumps are two ranks' dumps of groups groups, each listing ranks
// ranks and disagreeing on its first collective, with long sizes.
func wideDumps(groups, ranks int) map[int]flight.Dump {
	listed := make([]string, ranks)
	for i := range listed {
		listed[i] = strconv.Itoa(i)
	}
	long := make([]int, 200)
	dumps := map[int]flight.Dump{}
	for r := range 2 {
		d := flight.Dump{Version: "2.10", PgConfig: map[string]flight.PgConfig{}}
		for g := range groups {
			name := strconv.Itoa(g)
			d.PgConfig[name] = flight.PgConfig{Name: name, Desc: strings.Repeat("d", 100),
				Ranks: "[" + strings.Join(listed, ", ") + "]"}
			e := flight.Entry{RecordID: uint64(g), ProcessGroup: [2]string{name, "d"}, CollectiveSeqID: uint64(1 + r),
				ProfilingName: "nccl:all_reduce",
				InputSizes:    [][]int{long}, OutputSizes: [][]int{long}, InputDtypes: []string{"Float"},
				OutputDtypes: []string{"Float"}, State: "scheduled"}
			d.Entries = append(d.Entries, e)
		}
		dumps[r] = d
	}
	return dumps
}

// Note [fr-trace's output is bounded]: dumps of 100 disagreeing groups
// of 100 ranks each print a few KB and a count of the rest; --all prints
// them all.
func TestFrTraceOutputBounded(t *testing.T) {
	dir := t.TempDir()
	size := writeDumps(t, dir, wideDumps(100, 100))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"fr-trace", dir}, nil, &stdout, &stderr); code != 1 {
		t.Fatalf("fr-trace: exit %d, want 1\n%.2000s%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if stdout.Len() > 64<<10 ||
		!strings.Contains(out, "... and 84 more groups where the ranks disagree; --all prints them") ||
		!strings.Contains(out, "no dump from ranks [2 3 4") || !strings.Contains(out, "... 66 more]") ||
		!strings.Contains(out, "more bytes)") {
		t.Errorf("fr-trace of %d bytes of dumps printed %d bytes, want at most 64 KiB ending with a count of the "+
			"rest:\n%.3000s", size, stdout.Len(), out)
	}
	stdout.Reset()
	if code := run([]string{"fr-trace", "--all", dir}, nil, &stdout, &stderr); code != 1 ||
		strings.Count(stdout.String(), "Not all ranks joining") != 100 {
		t.Errorf("fr-trace --all: exit %d, %d findings, want 1 and 100", code,
			strings.Count(stdout.String(), "Not all ranks joining"))
	}
	t.Logf("%d bytes of dumps: %d bytes printed, %d with --all", size, len(out), stdout.Len())
}

// A dump whose one entry claims sequence number 10^15 is read at once,
// not by counting up to it.
func TestFrTraceHugeSequenceNumber(t *testing.T) {
	dir := t.TempDir()
	e := func(seq uint64) flight.Entry {
		return flight.Entry{ProcessGroup: [2]string{"0", "d"}, CollectiveSeqID: seq, ProfilingName: "nccl:all_reduce",
			State: "completed"}
	}
	writeDumps(t, dir,
		map[int]flight.Dump{0: {PgConfig: map[string]flight.PgConfig{"0": {Name: "0", Ranks: "[0]"}},
			Entries: []flight.Entry{e(1), e(1e15)}}})
	done := make(chan string, 1)
	go func() {
		var stdout, stderr bytes.Buffer
		code := run([]string{"fr-trace", dir}, nil, &stdout, &stderr)
		done <- fmt.Sprint(code, " ", stdout.String(), stderr.String())
	}()
	select {
	case got := <-done:
		if !strings.HasPrefix(got, "0 ") {
			t.Errorf("fr-trace: %s, want exit 0", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fr-trace of a dump with one entry numbered 10^15 runs for more than 10 s")
	}
}
