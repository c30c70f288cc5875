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
	w.Write(&timeline.Event{Name: `a "quoted" name`, Lane: timeline.LaneBucket + 3, Start: t0,
		End: t0.Add(time.Millisecond)})
	// reversed: zero duration
	w.Write(&timeline.Event{Name: "backward", Lane: timeline.LaneCompute, Start: t0, End: t0.Add(-time.Second)})
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
	if len(slices) != 2 || slices[0].Name != `a "quoted" name` || slices[0].Dur != 1000 || slices[0].Ts != 100e6 ||
		slices[1].Dur != 0 {
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
	// A link planted at the path (in a directory others can write) is
	// refused, and what it points at is untouched.
	dir := t.TempDir()
	victim := dir + "/victim"
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, dir+"/rank-1.json"); err != nil {
		t.Fatal(err)
	}
	if w, err := timeline.Create(dir+"/rank-1.json", 1); err == nil {
		w.Close()
		t.Error("Create wrote through a symbolic link")
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("the link's target is now %q", b)
	}
}

// jsonText is s as encoding/json decodes the JSON string encoding/json
// writes for it: each byte of invalid UTF-8 becomes U+FFFD.
func jsonText(s string) string {
	var b strings.Builder
	for _, r := range s { // an invalid byte ranges as U+FFFD, width 1
		b.WriteRune(r)
	}
	return b.String()
}

// trace writes one event named name on a lane named lane, with one
// argument keyed key, and decodes the trace.
func trace(t *testing.T, name, lane, key string) []event {
	t.Helper()
	var buf bytes.Buffer
	w := timeline.New(&buf, 3)
	w.NameLane(7, lane)
	e := timeline.Event{Name: name, Lane: 7, Start: time.Unix(1, 0), End: time.Unix(2, 0)}
	e.Args[0] = timeline.Arg{Key: key, Value: -5}
	w.Write(&e)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var events []event
	if err := json.Unmarshal(buf.Bytes(), &events); err != nil {
		t.Fatalf("the trace is not JSON: %v\n%q", err, buf.Bytes())
	}
	return events
}

// checkTrace checks that the names decode as they were written.
func checkTrace(t *testing.T, events []event, name, lane, key string) {
	t.Helper()
	var laneName, sliceName any
	var arg any
	for _, e := range events {
		switch {
		case e.Ph == "M" && e.Name == "thread_name" && e.Tid == 7:
			laneName = e.Args["name"]
		case e.Ph == "M" && e.Name == "thread_sort_index" && e.Tid == 7:
			if e.Args["sort_index"] != 7.0 || len(e.Args) != 1 {
				t.Errorf("lane 7's sort index: %v", e.Args)
			}
		case e.Ph == "X":
			sliceName, arg = e.Name, e.Args[jsonText(key)]
		}
	}
	if laneName != jsonText(lane) {
		t.Errorf("lane name %q decodes as %q", lane, laneName)
	}
	if sliceName != jsonText(name) {
		t.Errorf("event name %q decodes as %q", name, sliceName)
	}
	if key != "" && arg != -5.0 {
		t.Errorf("argument %q decodes as %v", key, arg)
	}
}

// Names with quotes, backslashes, control characters, invalid UTF-8,
// U+2028 and digits only are JSON strings that decode to what was
// written (invalid bytes as U+FFFD). A lane named "7" is named "7", not
// given a sort index.
func TestNamesAreJSONStrings(t *testing.T) {
	for _, s := range []string{"lane\x01\xff", `a "quoted" \ name`, "7", "", "tab\tnl\nnul\x00del\x7f", "\u2028\u2029",
		"é 日本 \U0001F600", "\xc3", "\xed\xa0\x80"} {
		checkTrace(t, trace(t, s, s, "k"+s), s, s, "k"+s)
	}
	var buf bytes.Buffer
	w := timeline.New(&buf, 0)
	w.NameLane(5, "lane\x01\xff")
	w.Close()
	if want := `"args":{"name":"lane\u0001\ufffd"}`; !strings.Contains(buf.String(), want) {
		t.Errorf("the lane's name is not written as %s:\n%s", want, buf.String())
	}
}

func FuzzTraceRoundTrip(f *testing.F) {
	f.Add("launch", "reducer", "bucket")
	f.Add("lane\x01\xff", "7", "\"")
	f.Add("\\u0000", "\u2028", "\xff\xfe")
	f.Fuzz(func(t *testing.T, name, lane, key string) {
		checkTrace(t, trace(t, name, lane, key), name, lane, key)
	})
}
