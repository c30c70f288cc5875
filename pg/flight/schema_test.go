package flight_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/flight"
)

// Note [the schema torch's analyzer reads]
//
// Written from pytorch/pytorch's source, read on 2026-11-26:
//   - torch/csrc/distributed/c10d/FlightRecorder.hpp (version_val "2.10";
//     the *_key constants and the Entry struct) for the key names and
//     the C++ types they are dumped from: size_t → JSON integer,
//     std::tuple<string,string> → 2-string array, optional<time_t> →
//     integer or null, bool → boolean, SmallVector<int64_t> sizes →
//     list of lists of integers, ScalarType → string;
//   - tools/flight_recorder/components/types.py (commit
//     8b0f6e4b392bd66e5e0705320088a78de1145f17; Op.__init__ and
//     Op.match) and builder.py (commit
//     883a873e2a122db634e8420b61e1df3a36a10592; build_groups_memberships,
//     build_collectives) for what the analyzer indexes: each entry's
//     profiling_name ("nccl:<op>[ a->b|a<-b]"), state, process_group,
//     input/output sizes and dtypes, collective_seq_id, p2p_seq_id,
//     record_id and frames; pg_config[name] with desc and ranks (a
//     string for ast.literal_eval); a newer types.py (its COLLECTIVES
//     set holds all_reduce_barrier and allreduce_coalesced, Op accepts
//     the "nccl" or "xccl" prefix, and Op.dtype_mismatch reads
//     input_sizes[0] and output_sizes[0], so no collective may have
//     empty sizes); and loader.py (commit
//     cff3eb47d0517c2ceb0615c500372d32872e8da4) for the top-level
//     entries, version and pg_config and the <prefix><rank> file name.

// kind is a JSON type as encoding/json decodes it into an any.
type kind int

const (
	integer kind = iota + 1
	str
	boolean
	object
	strPair   // [str, str]
	strList   // [str...]
	shapeList // [[int...]...]
	list
	intOrNull
)

// entrySchema is every key torch's dump_json writes for an entry, but
// duration_ms (only with timing on) and thread_id/thread_name (which
// the analyzer does not read), with its JSON type.
func entrySchema() map[string]kind {
	return map[string]kind{
		"record_id": integer, "pg_id": integer, "process_group": strPair,
		"collective_seq_id": integer, "p2p_seq_id": integer, "op_id": integer,
		"profiling_name": str, "time_created_ns": integer,
		"input_sizes": shapeList, "input_dtypes": strList,
		"output_sizes": shapeList, "output_dtypes": strList,
		"state":                      str,
		"time_discovered_started_ns": intOrNull, "time_discovered_completed_ns": intOrNull,
		"retired": boolean, "timeout_ms": integer, "is_p2p": boolean, "frames": list,
	}
}

// is reports whether v, decoded with UseNumber, has kind k.
func is(v any, k kind) bool {
	switch k {
	case integer:
		n, ok := v.(json.Number)
		_, err := strconv.ParseInt(string(n), 10, 64)
		return ok && err == nil
	case intOrNull:
		return v == nil || is(v, integer)
	case str:
		_, ok := v.(string)
		return ok
	case boolean:
		_, ok := v.(bool)
		return ok
	case object:
		_, ok := v.(map[string]any)
		return ok
	case list:
		_, ok := v.([]any)
		return ok
	case strPair:
		l, ok := v.([]any)
		return ok && len(l) == 2 && is(l[0], str) && is(l[1], str)
	case strList:
		return all(v, str)
	case shapeList:
		l, ok := v.([]any)
		for _, s := range l {
			ok = ok && all(s, integer)
		}
		return ok
	}
	return false
}

// all reports whether v is a list of k.
func all(v any, k kind) bool {
	l, ok := v.([]any)
	for _, x := range l {
		ok = ok && is(x, k)
	}
	return ok
}

// A dump holds every key torch's analyzer reads, with the JSON type
// torch writes, and the states and names it knows.
func TestDumpMatchesTorchsSchema(t *testing.T) {
	rs := recorded(t, 2, flight.Options{})
	onEach(t, rs, func(ctx context.Context, r int, g *flight.Recorder) error {
		var p2p pg.PointToPoint
		pg.As(g, &p2p)
		ws := []pg.Work{g.AllReduce(ctx, pg.Float32s(make([]float32, 3)), pg.Op(pg.Sum)), g.Barrier(ctx)}
		if r == 0 {
			ws = append(ws, p2p.Send(ctx, pg.NewTensor(pg.Float16, 2), 1, 0))
		} else {
			ws = append(ws, p2p.Recv(ctx, pg.NewTensor(pg.Float16, 2), 0, 0))
		}
		return pg.WaitAll(ctx, ws...)
	})
	_ = rs[0].AllReduce(context.Background(), pg.Float32s(make([]float32, 3)), pg.Op(pg.Sum)) // stays scheduled
	var buf bytes.Buffer
	if err := rs[0].Dump(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil {
		t.Fatal(err)
	}
	checkTop(t, top)
	entries, _ := top["entries"].([]any)
	if len(entries) != 4 {
		t.Fatalf("%d entries, want 4", len(entries))
	}
	states := map[string]bool{}
	for i, v := range entries {
		e, _ := v.(map[string]any)
		for key, k := range entrySchema() {
			if x, ok := e[key]; !ok || !is(x, k) {
				t.Errorf("entry %d: %q is %#v (present %v), want kind %d", i, key, x, ok, k)
			}
		}
		states[e["state"].(string)] = true
	}
	for s := range states {
		if s != "scheduled" && s != "started" && s != "completed" {
			t.Errorf("state %q is none of torch's scheduled, started, completed", s)
		}
	}
	if name := entries[2].(map[string]any)["profiling_name"]; name != "nccl:send 0->1" {
		t.Errorf("send's profiling_name %v, want nccl:send 0->1", name)
	}
	for i, v := range entries {
		e := v.(map[string]any)
		in, _ := e["input_sizes"].([]any)
		out, _ := e["output_sizes"].([]any)
		if len(in) == 0 || len(out) == 0 {
			t.Errorf("entry %d (%v) has no first size, which torch's analyzer reads", i, e["profiling_name"])
		}
	}
}

// checkTop checks the top-level keys and pg_config's and pg_status's shapes.
func checkTop(t *testing.T, top map[string]any) {
	t.Helper()
	if top["version"] != flight.Version || !is(top["entries"], list) {
		t.Errorf("version %v, entries %T", top["version"], top["entries"])
	}
	cfg, _ := top["pg_config"].(map[string]any)
	c, _ := cfg["0"].(map[string]any)
	if !is(c["name"], str) || !is(c["desc"], str) || c["ranks"] != "[0, 1]" {
		t.Errorf("pg_config: %v", top["pg_config"])
	}
	status, _ := top["pg_status"].(map[string]any)
	s, _ := status["0"].(map[string]any)
	for _, key := range []string{"last_enqueued_collective", "last_started_collective", "last_completed_collective"} {
		if !is(s[key], str) {
			t.Errorf("pg_status[0][%q] = %#v, want a string", key, s[key])
		}
	}
}
