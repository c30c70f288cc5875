package combo_test

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCombinations is the metamorphic test, after pebble's:
// every combination of the options, the comm hooks, the backends, the
// world sizes, the dtypes and the per-rank graphs of the branch model
// (testmodel.Branch's heads) must train as a plain reference says, and
// keep the replicas bitwise equal where DDP promises it. Each combination
// is drawn from a seed (combo_draw_test.go), trained for a few steps on
// every rank (combo_run_test.go), and checked step by step afterwards
// (combo_check_test.go) against references computed in float64 from
// Gorgonia's own gradients (combo_ref_test.go, combo_powersgd_test.go).
//
//	go test -count=1 -run TestCombinations ./tests/combo                          # the default budget, seeds 1..N
//	go test -count=1 -run TestCombinations -combo.seed=417 -v ./tests/combo       # replay one seed
//	go test -count=1 -run TestCombinations -combo.n=5000 ./tests/combo            # seeds 1..5000
//	go test -count=1 -run TestCombinations -combo.for=2h -timeout=0 ./tests/combo # random seeds for two hours
//
// A failing combination names its seed and the command that replays it.
var (
	flagComboSeed = flag.Uint64("combo.seed", 0,
		"TestCombinations: replay the one combination drawn from this seed (1 or more)")
	flagComboN   = flag.Int("combo.n", 0, "TestCombinations: draw the combinations of seeds 1..n (0: the default budget)")
	flagComboFor = flag.Duration("combo.for", 0, "TestCombinations: draw combinations from random seeds for this long")
)

// raceEnabled is set by race_test.go under -race.
var raceEnabled bool

// The default budget: seeds 1..comboBudget(). Without the race detector
// it takes 25–35 s on a shared 2-core machine. The race detector makes
// each combination four to five times slower, and CI (go test -race
// ./...) runs every other package beside it, so it draws 150 (about
// 12 s); each bug planted to prove the test was caught within the first
// 46 seeds (docs/reducer.md).
const (
	comboBudgetPlain = 1500
	comboBudgetRace  = 150
)

func comboBudget() int {
	if raceEnabled {
		return comboBudgetRace
	}
	return comboBudgetPlain
}

// comboMaxFailures stops a long run after this many failing combinations.
const comboMaxFailures = 10

func TestCombinations(t *testing.T) {
	var tally comboTally
	failures := 0
	run := func(seed uint64) {
		ok := t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			c := drawCombo(seed)
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("combination: %v\nreplay: go test -count=1 -run 'TestCombinations' -combo.seed=%d -v ./tests/combo",
						c, seed)
				}
			})
			tally.add(c, runCombo(t, c))
		})
		if !ok {
			failures++
		}
	}
	start := time.Now()
	switch {
	case *flagComboSeed != 0:
		run(*flagComboSeed)
	case *flagComboFor > 0:
		first := uint64(start.UnixNano())&(1<<40-1) | 1<<40 // far from the default seeds
		t.Logf("drawing from seed %d on, for %v", first, *flagComboFor)
		for seed := first; time.Since(start) < *flagComboFor && failures < comboMaxFailures; seed++ {
			run(seed)
		}
	default:
		n := *flagComboN
		if n <= 0 {
			n = comboBudget()
		}
		for seed := uint64(1); seed <= uint64(n) && failures < comboMaxFailures; seed++ {
			run(seed)
		}
	}
	t.Logf("%v in %v", &tally, time.Since(start).Round(time.Millisecond))
}

// comboTally counts the combinations run, by outcome and by what they drew.
type comboTally struct {
	mu      sync.Mutex
	trained int
	refused map[string]int // by refusal
	hooks   map[string]int // trained, by hook
	drawn   map[string]int // trained, by what else they drew
}

func (s *comboTally) add(c *combo, refused string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused, s.hooks, s.drawn = map[string]int{}, map[string]int{}, map[string]int{}
	}
	if refused != "" {
		s.refused[refused]++
		return
	}
	s.trained++
	s.hooks[c.hookName()]++
	for _, f := range c.features() {
		s.drawn[f]++
	}
}

func (s *comboTally) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	count := func(m map[string]int) (int, string) {
		total, parts := 0, []string{}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			total += m[k]
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		}
		return total, strings.Join(parts, ", ")
	}
	refused, why := count(s.refused)
	_, hooks := count(s.hooks)
	_, drawn := count(s.drawn)
	return fmt.Sprintf("%d combinations: %d trained and checked (%s; %s); %d refused by design (%s)",
		s.trained+refused, s.trained, hooks, drawn, refused, why)
}
