package flight

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/goddp/ddp/pg"
)

// Note [torch's layout]
//
// A dump is the JSON that torch's FlightRecorder::dump_json writes
// (torch/csrc/distributed/c10d/FlightRecorder.hpp and
// FlightRecorderDetail.hpp, version_val "2.10"), which
// tools/flight_recorder/fr_trace.py analyses: the keys, their JSON
// types and the state names are copied from there. Where our world
// differs we choose what torch's analyzer accepts:
//
//   - profiling_name is "nccl:<op>" whatever the backend: the analyzer
//     (components/types.py, Op.__init__) asserts the "nccl" prefix, and
//     <op> is a name in its COLLECTIVES or P2P sets (see opName).
//   - Tensors are flat, so each size is a one-element shape [n]; a
//     barrier is recorded as torch's NCCL barrier is, an allreduce
//     ("all_reduce_barrier") of one Float.
//   - dtypes are c10 ScalarType names ("Float", "Half", ...).
//   - frames are empty: there are no Python stacks to give, and the
//     analyzer's builder reads the key.
//   - pg_config's ranks is a string such as "[0, 1, 2]", which the
//     analyzer parses with ast.literal_eval; a Split subgroup, whose
//     members the recorder does not learn, has "[]".
//
// Files are named <prefix><global rank> (DefaultPrefix is torch's
// default TORCH_NCCL_DEBUG_INFO_TEMP_FILE basename), which is what the
// analyzer's loader matches. torch's own dumps are pickles unless JSON
// is asked for; these are always JSON.

// Version is the dump layout's version, torch's version_val.
const Version = "2.10"

// DefaultPrefix begins every dump file's name; the global rank ends it.
const DefaultPrefix = "nccl_trace_rank_"

// opName is torch's profiling name for op: one its analyzer's
// COLLECTIVES or P2P sets hold where torch has the operation.
func opName(op pg.OpType) string {
	switch op {
	case pg.OpAllReduce:
		return "all_reduce"
	case pg.OpBarrier:
		return "all_reduce_barrier"
	case pg.OpAllGather:
		return "all_gather"
	case pg.OpReduceScatter:
		return "_reduce_scatter_base"
	case pg.OpAllToAll:
		return "all_to_all"
	case pg.OpAllReduceCoalesced:
		return "allreduce_coalesced"
	case pg.OpAllGatherCoalesced:
		return "all_gather_into_tensor_coalesced"
	case pg.OpReduceScatterCoalesced:
		return "reduce_scatter_tensor_coalesced"
	}
	return op.String() // broadcast, reduce, gather, scatter, send, recv
}

// dtypeName is c10's ScalarType name for d.
func dtypeName(d pg.Dtype) string {
	switch d {
	case pg.Float32:
		return "Float"
	case pg.Float64:
		return "Double"
	case pg.Float16:
		return "Half"
	case pg.BFloat16:
		return "BFloat16"
	case pg.Int32:
		return "Int"
	case pg.Int64:
		return "Long"
	case pg.Uint8:
		return "Byte"
	}
	return "Undefined"
}

// Dump is one rank's dump, as torch's dump_json writes it.
type Dump struct {
	Version  string                       `json:"version"`
	PgConfig map[string]PgConfig          `json:"pg_config"`
	PgStatus map[string]map[string]string `json:"pg_status"`
	Entries  []Entry                      `json:"entries"`
}

// PgConfig is a group's entry in pg_config, keyed by its name.
type PgConfig struct {
	Name  string `json:"name"`
	Desc  string `json:"desc"`
	Ranks string `json:"ranks"`
}

// Entry is one recorded operation, a torch trace entry.
type Entry struct {
	RecordID                  uint64     `json:"record_id"`
	PgID                      int        `json:"pg_id"`
	ProcessGroup              [2]string  `json:"process_group"`
	CollectiveSeqID           uint64     `json:"collective_seq_id"`
	P2PSeqID                  uint64     `json:"p2p_seq_id"`
	OpID                      uint64     `json:"op_id"`
	ProfilingName             string     `json:"profiling_name"`
	TimeCreatedNs             int64      `json:"time_created_ns"`
	DurationMs                *float64   `json:"duration_ms,omitempty"`
	InputSizes                [][]int    `json:"input_sizes"`
	InputDtypes               []string   `json:"input_dtypes"`
	OutputSizes               [][]int    `json:"output_sizes"`
	OutputDtypes              []string   `json:"output_dtypes"`
	State                     string     `json:"state"`
	TimeDiscoveredStartedNs   *int64     `json:"time_discovered_started_ns"`
	TimeDiscoveredCompletedNs *int64     `json:"time_discovered_completed_ns"`
	Retired                   bool       `json:"retired"`
	TimeoutMs                 int64      `json:"timeout_ms"`
	IsP2P                     bool       `json:"is_p2p"`
	Frames                    []struct{} `json:"frames"`
}

// Snapshot returns the ring as a Dump: every group recorded through r
// or a subgroup made from it, oldest entry first.
func (r *Recorder) Snapshot() Dump {
	es, groups := r.ring.snapshot()
	d := Dump{
		Version:  Version,
		PgConfig: make(map[string]PgConfig, len(groups)),
		PgStatus: make(map[string]map[string]string, len(groups)),
		Entries:  make([]Entry, 0, len(es)),
	}
	last := make([][3]uint64, len(groups)) // enqueued, started, completed
	for _, e := range es {
		d.Entries = append(d.Entries, toEntry(e))
		if !e.c.p2p {
			l := &last[e.grp.id]
			l[0] = e.collSeq
			if e.started != 0 {
				l[1] = e.collSeq
			}
			if e.completed != 0 {
				l[2] = e.collSeq
			}
		}
	}
	for i, g := range groups {
		d.PgConfig[g.name] = PgConfig{Name: g.name, Desc: g.desc, Ranks: ranksString(g.ranks)}
		d.PgStatus[strconv.Itoa(i)] = map[string]string{
			"last_enqueued_collective":  strconv.FormatUint(last[i][0], 10),
			"last_started_collective":   strconv.FormatUint(last[i][1], 10),
			"last_completed_collective": strconv.FormatUint(last[i][2], 10),
		}
	}
	return d
}

// toEntry converts a ring entry to torch's layout.
func toEntry(e entry) Entry {
	name := "nccl:" + opName(e.c.op)
	switch e.c.op { // the group's ranks, as torch writes them
	case pg.OpSend:
		name += fmt.Sprintf(" %d->%d", e.grp.rank, e.c.peer)
	case pg.OpRecv:
		name += fmt.Sprintf(" %d<-%d", e.grp.rank, e.c.peer)
	}
	out := Entry{
		RecordID: e.id, PgID: e.grp.id, ProcessGroup: [2]string{e.grp.name, e.grp.desc},
		CollectiveSeqID: e.collSeq, P2PSeqID: e.p2pSeq, OpID: e.id + 1,
		ProfilingName: name, TimeCreatedNs: e.created,
		State: "scheduled", Retired: e.retired, TimeoutMs: e.grp.timeoutMS, IsP2P: e.c.p2p,
		Frames: []struct{}{},
	}
	out.InputSizes, out.InputDtypes = shapes(e.c.in, e.c.ins, e.c.dtype)
	out.OutputSizes, out.OutputDtypes = shapes(e.c.out, e.c.outs, e.c.dtype)
	if e.started != 0 {
		s := e.started
		out.TimeDiscoveredStartedNs, out.State = &s, "started"
	}
	if e.completed != 0 {
		c := e.completed
		out.TimeDiscoveredCompletedNs, out.State = &c, "completed"
	}
	if e.duration > 0 { // torch's duration_ms: cudaEventElapsedTime (Note [event times])
		ms := float64(e.duration) / float64(time.Millisecond)
		out.DurationMs = &ms
	}
	return out
}

// shapes is one shape [n] per tensor (n < 0: no tensor) and their dtypes.
func shapes(n int, ns []int, d pg.Dtype) ([][]int, []string) {
	if ns == nil {
		if n < 0 {
			return [][]int{}, []string{}
		}
		ns = []int{n}
	}
	s, t := make([][]int, len(ns)), make([]string, len(ns))
	for i, k := range ns {
		s[i], t[i] = []int{k}, dtypeName(d)
	}
	return s, t
}

// ranksString formats ranks as Python prints a list, "[0, 1, 2]".
func ranksString(ranks []int) string {
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = strconv.Itoa(r)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Dump writes the ring to w as JSON in torch's layout.
func (r *Recorder) Dump(w io.Writer) error {
	enc := json.NewEncoder(w)
	return enc.Encode(r.Snapshot())
}

// DumpFile writes the ring to dir/<DefaultPrefix><global rank>,
// creating dir, and returns the file's path. It writes a temporary file
// and renames it, so a reader never sees half a dump.
func (r *Recorder) DumpFile(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("flight: dump: %w", err)
	}
	path := filepath.Join(dir, DefaultPrefix+strconv.Itoa(r.ring.rank))
	f, err := os.CreateTemp(dir, ".flight-*")
	if err != nil {
		return "", fmt.Errorf("flight: dump: %w", err)
	}
	defer os.Remove(f.Name()) // fails harmlessly once renamed
	if err := r.Dump(f); err != nil {
		f.Close()
		return "", fmt.Errorf("flight: dump: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("flight: dump: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("flight: dump: %w", err)
	}
	return path, nil
}
