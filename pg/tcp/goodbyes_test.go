package tcp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestOneGoodbyeLinePerRank: when the ranks of an 8-rank group close one
// after the other, each logs at most one line for the peers that closed
// before it, and the last names all seven, not a line per peer (Note
// [one goodbye line]).
func TestOneGoodbyeLinePerRank(t *testing.T) {
	const n = 8
	logs := make([]*observer.ObservedLogs, n)
	gs := newGroups(t, n, 30*time.Second, func(o *Options) {
		var core zapcore.Core
		core, logs[o.Rank] = observer.New(zapcore.InfoLevel)
		o.Logger = zap.New(core)
	})
	for _, g := range gs[:n-1] {
		g.Close()
	}
	time.Sleep(300 * time.Millisecond) // rank 7 reads the goodbyes
	gs[n-1].Close()
	for r, l := range logs {
		var lines []string
		for _, e := range l.All() {
			if strings.Contains(e.Message, "closed its process group") ||
				strings.Contains(e.Message, "closed their process groups") {
				lines = append(lines, fmt.Sprint(e.Message, " ", e.ContextMap()["peers"]))
			}
		}
		if len(lines) > 1 {
			t.Errorf("rank %d logged %d goodbye lines, want at most one: %q", r, len(lines), lines)
		}
		if r == n-1 && (len(lines) != 1 || lines[0] != "7 peers closed their process groups 0-6") {
			t.Errorf("rank %d, the last to close: %q, want one line naming peers 0-6", r, lines)
		}
	}
}

func TestRankRanges(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, ""}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3}, "0-3"}, {[]int{0, 1, 2, 3, 5, 7, 8, 9}, "0-3, 5, 7-9"},
		{[]int{1, 3}, "1, 3"}} {
		if got := rankRanges(c.in); got != c.want {
			t.Errorf("rankRanges(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
