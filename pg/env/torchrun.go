package env

import "strconv"

// torchrun's agent variables, set on every worker it starts.
// torchrun 1.13 sets all of them; GROUP_RANK is the node's index.
var torchrunAgentVars = []string{
	"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
	"TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_ERROR_FILE", "GROUP_RANK", "GROUP_WORLD_SIZE",
}

// underAgent reports whether torchrun's elastic agent started this
// process: it sets TORCHELASTIC_RUN_ID, GROUP_RANK and the others, which
// no hand-written environment needs.
func (r reader) underAgent() bool { return r.firstSet(torchrunAgentVars) != "" }

// elastic reads torchrun's agent variables into c.
func (r reader) elastic(c *Config) error {
	if v, set := r.str("TORCHELASTIC_USE_AGENT_STORE"); set {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return invalid("TORCHELASTIC_USE_AGENT_STORE=%q is not a boolean (torchrun sets True or False)", v)
		}
		c.UseAgentStore = b
	}
	c.RunID, _ = r.str("TORCHELASTIC_RUN_ID")
	for _, f := range []struct {
		name string
		dst  *int
	}{
		{"TORCHELASTIC_RESTART_COUNT", &c.RestartCount},
		{"TORCHELASTIC_MAX_RESTARTS", &c.MaxRestarts},
		{"GROUP_RANK", &c.GroupRank},
	} {
		n, set, err := r.int(f.name)
		if err != nil {
			return err
		}
		if set && n < 0 {
			return invalid("%s=%d must not be negative", f.name, n)
		}
		*f.dst = n
	}
	if c.MaxRestarts > 0 && c.RestartCount > c.MaxRestarts {
		return invalid("TORCHELASTIC_RESTART_COUNT=%d exceeds TORCHELASTIC_MAX_RESTARTS=%d", c.RestartCount, c.MaxRestarts)
	}
	return nil
}
