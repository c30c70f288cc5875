package env

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"node01", []string{"node01"}},
		{"node[01-04,07]", []string{"node01", "node02", "node03", "node04", "node07"}},
		{"a1,b[2-3]", []string{"a1", "b2", "b3"}},
		{"gpu[8-10]", []string{"gpu8", "gpu9", "gpu10"}},
		{"gpu[08-10]", []string{"gpu08", "gpu09", "gpu10"}},
		{"n[001-003]", []string{"n001", "n002", "n003"}},
		{"n[0]", []string{"n0"}},
		{"n[7,3,5]", []string{"n7", "n3", "n5"}},
		{"rack[1-2]-node[01-02]", []string{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
		{"n[1-2].ib.cluster", []string{"n1.ib.cluster", "n2.ib.cluster"}},
		{"x[1-2]y[3]z[4-5]", []string{"x1y3z4", "x1y3z5", "x2y3z4", "x2y3z5"}},
		{"[1-2]", []string{"1", "2"}},
		{"a,,b,", []string{"a", "b"}},
		{"a b\tc", []string{"a", "b", "c"}},
		{"login_1,compute-0-[1-2]", []string{"login_1", "compute-0-1", "compute-0-2"}},
		{"tux[1-2],tux[1-2]", []string{"tux1", "tux2", "tux1", "tux2"}},
		{"10.0.0.[1-2]", []string{"10.0.0.1", "10.0.0.2"}},
	}
	for _, tt := range tests {
		got, err := ExpandHostlist(tt.in)
		if err != nil {
			t.Errorf("ExpandHostlist(%q): %v", tt.in, err)
			continue
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ExpandHostlist(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "no host names"},
		{" , ", "no host names"},
		{"node[1-2", "'[' not closed"},
		{"node1-2]", "']' without '['"},
		{"node[[1-2]]", "nested '['"},
		{"node[]", "empty brackets"},
		{"node[3-1]", "runs backwards"},
		{"node[1,]", "a number is missing"},
		{"node[,1]", "a number is missing"},
		{"node[1-]", "a number is missing"},
		{"node[-1]", "a number is missing"},
		{"node[1--2]", `"-2" is not a number`},
		{"node[a-b]", `"a" is not a number`},
		{"node[1 -2]", "white space inside brackets"},
		{`node\,1`, "backslash"},
		{"node/1", `'/' is not allowed`},
		{"node:22", `':' is not allowed`},
		{"node[1-99999999]", "more than 65536 hosts"},
		{"a[1-300]b[1-300]", "more than 65536 hosts"},
		{"n[1234567890]", "too long a number"},
	}
	for _, tt := range tests {
		got, err := ExpandHostlist(tt.in)
		if err == nil {
			t.Errorf("ExpandHostlist(%q) = %q; want an error saying %q", tt.in, got, tt.want)
			continue
		}
		if got != nil {
			t.Errorf("ExpandHostlist(%q) returned hosts %q with its error", tt.in, got)
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.in)) {
			t.Errorf("ExpandHostlist(%q) error %q; want it to quote the list and say %q", tt.in, err, tt.want)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	for in, want := range map[string][]int{
		"4":         {4},
		"2(x3),1":   {2, 2, 2, 1},
		"1,2(x2),3": {1, 2, 2, 3},
	} {
		got, err := parseTasksPerNode(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseTasksPerNode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "2(x0)", "2(x3", "x", "2(3)", "-1", "1(x70000)"} {
		if got, err := parseTasksPerNode(in); err == nil {
			t.Errorf("parseTasksPerNode(%q) = %v; want an error", in, got)
		}
	}
}

func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-04,07]", "a1,b[2-3]", "rack[1-2]-node[01-02]", "x[", "]", "n[9-1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			if hosts != nil {
				t.Fatalf("hosts %q with error %v", hosts, err)
			}
			return
		}
		if len(hosts) == 0 || len(hosts) > MaxHosts {
			t.Fatalf("%d hosts", len(hosts))
		}
		for _, h := range hosts {
			if h == "" || strings.ContainsAny(h, "[], \t") {
				t.Fatalf("ExpandHostlist(%q) gave host %q", s, h)
			}
		}
	})
}
