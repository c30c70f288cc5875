package timeline_test

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goddp/ddp/timeline"
)

func Example() {
	w := timeline.New(os.Stdout, 1)
	start := time.Unix(1_700_000_000, 250) // 250ns past the second
	e := timeline.Event{Name: "launch", Lane: timeline.LaneReducer, Start: start, End: start.Add(1500 * time.Nanosecond)}
	e.Args[0] = timeline.Arg{Key: "bucket", Value: 0}
	w.Write(&e)
	w.Close()
	// Output:
	// [
	// {"ph":"M","name":"process_name","pid":1,"args":{"name":"rank 1"}},
	// {"ph":"M","name":"process_sort_index","pid":1,"args":{"sort_index":1}},
	// {"ph":"M","name":"thread_name","pid":1,"tid":2,"args":{"name":"reducer"}},
	// {"ph":"M","name":"thread_sort_index","pid":1,"tid":2,"args":{"sort_index":2}},
	// {"ph":"X","name":"launch","pid":1,"tid":2,"ts":1700000000000000.250,"dur":1.500,"args":{"bucket":0}}
	// ]
}

type event struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	Tid  int            `json:"tid"`
	Ts   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	Args map[string]any `json:"args"`
}

func TestTraceIsJSONWithNamedLanes(t *testing.T) {
	var buf bytes.Buffer
	w := timeline.New(&buf, 0)
	t0 := time.Unix(100, 0)
	w.Write(&timeline.Event{Name: `a "quoted" name`, Lane: timeline.LaneBucket + 3, Start: t0, End: t0.Add(time.Millisecond)})
	w.Write(&timeline.Event{Name: "backward", Lane: timeline.LaneCompute, Start: t0, End: t0.Add(-time.Second)}) // reversed: zero duration
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w.Write(&timeline.Event{Name: "late", Lane: timeline.LaneStep, Start: t0, End: t0}) // dropped
	var events []event
	if err := json.Unmarshal(buf.Bytes(), &events); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, buf.String())
	}
	names := map[int]string{}
	var slices []event
	for _, e := range events {
		if e.Ph == "M" && e.Name == "thread_name" {
			names[e.Tid] = e.Args["name"].(string)
		}
		if e.Ph == "X" {
			slices = append(slices, e)
		}
	}
	if names[timeline.LaneBucket+3] != "bucket 3" || names[timeline.LaneCompute] != "compute" {
		t.Errorf("lane names %v", names)
	}
	if len(slices) != 2 || slices[0].Name != `a "quoted" name` || slices[0].Dur != 1000 || slices[0].Ts != 100e6 || slices[1].Dur != 0 {
		t.Errorf("events %+v", slices)
	}
}

func TestWriteAllocatesNothing(t *testing.T) {
	w := timeline.New(io.Discard, 0)
	t0 := time.Now()
	e := timeline.Event{Name: "copy", Lane: timeline.LaneBucket + 7, Start: t0, End: t0.Add(time.Microsecond)}
	e.Args[0] = timeline.Arg{Key: "param", Value: 12}
	w.Write(&e) // names the lane, grows the buffer
	if n := testing.AllocsPerRun(100, func() { w.Write(&e) }); n != 0 {
		t.Errorf("Write allocates %v times", n)
	}
}

func TestCreate(t *testing.T) {
	path := t.TempDir() + "/rank-0.json"
	w, err := timeline.Create(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !strings.HasSuffix(string(b), "\n]\n") || !json.Valid(b) {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := timeline.Create(t.TempDir()+"/no/such/dir/x.json", 0); err == nil {
		t.Error("Create in a missing directory succeeded")
	}
}
