package shm

import (
	"slices"
	"testing"
)

// TestAgreeHosts checks the agreement on made-up publications: hosts,
// ranks that share with no one, and the greedy drop of ranks that cannot
// share with every other rank of their host.
func TestAgreeHosts(t *testing.T) {
	for _, c := range []struct {
		name   string
		host   []string
		mapped [][]int
		want   [][]int
	}{
		{"one host", []string{"a", "a", "a"}, [][]int{{1, 2}, {0, 2}, {0, 1}}, [][]int{{0, 1, 2}}},
		{"two hosts", []string{"a", "b", "a", "b"}, [][]int{{2}, {3}, {0}, {1}}, [][]int{{0, 2}, {1, 3}}},
		{"off and alone", []string{"a", "", "a", "b"}, [][]int{{2}, nil, {0}, nil}, [][]int{{0, 2}, {1}, {3}}},
		// Rank 1 is in another network namespace: it mapped no one and
		// no one mapped it.
		{"other namespace", []string{"a", "a", "a"}, [][]int{{2}, nil, {0}}, [][]int{{0, 2}, {1}}},
		// 0 and 1 mapped each other, 2 only 0, and 0 did not map 2: the
		// highest of the least connected goes.
		{"one-sided", []string{"a", "a", "a"}, [][]int{{1}, {0, 2}, {0, 1}}, [][]int{{0, 1}, {2}}},
		// Nobody could map anybody: everyone is alone.
		{"none", []string{"a", "a"}, [][]int{nil, nil}, [][]int{{0}, {1}}},
		// A square with one diagonal missing: {0,1,2} stays (3 has the
		// fewest, and is the highest of equals).
		{"square", []string{"a", "a", "a", "a"}, [][]int{{1, 2, 3}, {0, 2}, {0, 1, 3}, {0, 2}}, [][]int{{0, 1, 2}, {3}}},
		// Two network namespaces on one machine (one boot id), two ranks
		// in each: each pair maps only its own. Two worlds, not one pair
		// and two loners (the old greedy drop gave [[0 1] [2] [3]]).
		{"two namespaces", []string{"a", "a", "a", "a"}, [][]int{{1}, {0}, {3}, {2}}, [][]int{{0, 1}, {2, 3}}},
		// Three namespaces interleaved by rank.
		{"three namespaces", []string{"a", "a", "a", "a", "a", "a"},
			[][]int{{3}, {4}, {5}, {0}, {1}, {2}}, [][]int{{0, 3}, {1, 4}, {2, 5}}},
		// A rank dropped from the first world forms one with a later rank:
		// 0-1-2 a triangle, 3 maps only 2 and 4; 4 only 3.
		{"dropped rank pairs up", []string{"a", "a", "a", "a", "a"},
			[][]int{{1, 2}, {0, 2}, {0, 1, 3}, {2, 4}, {3}}, [][]int{{0, 1, 2}, {3, 4}}},
	} {
		got := agreeHosts(c.host, c.mapped)
		if !slices.EqualFunc(got, c.want, slices.Equal) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}
