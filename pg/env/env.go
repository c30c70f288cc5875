package env

import (
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/internal/wire"
)

// Where a Config came from.
const (
	SourceTorchrun = "torchrun" // RANK, WORLD_SIZE: torchrun, PyTorchJob
	SourceMPI      = "mpirun"   // OMPI_COMM_WORLD_*
	SourceSlurm    = "slurm"    // SLURM_PROCID, SLURM_NTASKS: a task of srun
	SourceKubeflow = "kubeflow" // PET_NODE_RANK, PET_NNODES: Kubeflow Trainer v2, one process per pod
	SourceIndexed  = "indexed"  // JOB_COMPLETION_INDEX and WORLD_SIZE: an Indexed Job or a JobSet
	SourceNone     = "none"     // no launcher: a single process
)

// DefaultMasterPort is the store port when MASTER_PORT is unset, as torch's.
const DefaultMasterPort = 29500

// Config is this process's place in the job.
type Config struct {
	Rank, WorldSize           int
	LocalRank, LocalWorldSize int // on this machine
	MasterAddr                string
	MasterPort                int
	Secret                    []byte // nil for a single-rank job that set none
	Source                    string // SourceTorchrun, SourceMPI, SourceSlurm or SourceNone

	// GroupRank is the index of this process's node (torchrun's
	// GROUP_RANK, Slurm's SLURM_NODEID); 0 when the launcher sets none.
	GroupRank int

	// torchrun's elastic agent (zero values when not under torchrun).
	//
	// UseAgentStore is TORCHELASTIC_USE_AGENT_STORE=True: the agent
	// already serves a c10d TCPStore at MasterAddr:MasterPort, so no rank
	// may host a store there (IsStoreHost is false on every rank).
	UseAgentStore bool
	RunID         string // TORCHELASTIC_RUN_ID: the rendezvous run id
	RestartCount  int    // TORCHELASTIC_RESTART_COUNT: restarts so far, 0 on the first attempt
	MaxRestarts   int    // TORCHELASTIC_MAX_RESTARTS: torchrun's --max-restarts
}

// StoreAddr is the address every rank dials for the rendezvous store.
func (c Config) StoreAddr() string {
	return net.JoinHostPort(c.MasterAddr, strconv.Itoa(c.MasterPort))
}

// StoreListenAddr is where the store host listens: the store address
// itself when MASTER_ADDR is a loopback address, so that a single-machine
// job listens on loopback only; otherwise every interface on the port, as
// c10d does, since MASTER_ADDR may name a service rather than a local
// address.
func (c Config) StoreListenAddr() string {
	if isLoopback(c.MasterAddr) {
		return c.StoreAddr()
	}
	return net.JoinHostPort("", strconv.Itoa(c.MasterPort))
}

// IsStoreHost reports whether this process hosts the store: rank 0, as
// c10d's is_master, unless torchrun's agent serves the store
// (UseAgentStore).
func (c Config) IsStoreHost() bool { return c.Rank == 0 && !c.UseAgentStore }

// String describes c without the secret.
func (c Config) String() string {
	secret := "unset"
	if c.Secret != nil {
		secret = fmt.Sprintf("%d bytes", len(c.Secret))
	}
	return fmt.Sprintf("rank %d of %d (local %d of %d) from %s, store %s, secret %s",
		c.Rank, c.WorldSize, c.LocalRank, c.LocalWorldSize, c.Source, c.StoreAddr(), secret)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// FromLookup reads the configuration through lookup, which is
// os.LookupEnv in a program. Errors wrap pg.ErrInvalidArgument and name
// the variable at fault; they never include the secret.
func FromLookup(lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		return Config{}, invalid("FromLookup needs a lookup function, such as os.LookupEnv")
	}
	r, indexed := reader{lookup}.withIndexedJobRank()
	c, err := r.ranks()
	if err != nil {
		return Config{}, err
	}
	if indexed && c.Source == SourceTorchrun {
		c.Source = SourceIndexed
	}
	if err := r.master(&c); err != nil {
		return Config{}, err
	}
	if err := r.secret(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: env: %s", pg.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// master reads MASTER_ADDR and MASTER_PORT into c. Under Slurm, unset
// ones are derived: the first host of the step's node list, and
// SlurmMasterPort of the job id.
func (r reader) master(c *Config) error {
	if c.Source == SourceKubeflow {
		r = r.petMaster()
	}
	p, portSet, err := r.int("MASTER_PORT")
	switch {
	case err != nil:
		return err
	case portSet && (p < 1 || p > 65535):
		return invalid("MASTER_PORT=%d is not a TCP port (1 to 65535)", p)
	case portSet:
		c.MasterPort = p
	case c.UseAgentStore:
		return invalid("TORCHELASTIC_USE_AGENT_STORE is set but MASTER_PORT is not; torchrun sets both, to where its agent " +
			"serves the store")
	case c.Source == SourceSlurm:
		if c.MasterPort, err = r.slurmPort(); err != nil {
			return err
		}
	default:
		c.MasterPort = DefaultMasterPort
	}
	addr, set := r.str("MASTER_ADDR")
	switch {
	case set:
	case c.UseAgentStore:
		return invalid("TORCHELASTIC_USE_AGENT_STORE is set but MASTER_ADDR is not; torchrun sets both, to where its agent " +
			"serves the store")
	case c.Source == SourceSlurm:
		if addr, err = r.slurmMaster(); err != nil {
			return err
		}
	case c.WorldSize > 1 && portSet:
		return invalid("MASTER_PORT is set but MASTER_ADDR is not; every rank of a %d-rank job needs the address of rank "+
			"0's store: set MASTER_ADDR to rank 0's host", c.WorldSize)
	case c.WorldSize > 1:
		return invalid("MASTER_ADDR is not set; every rank of a %d-rank job needs the address of rank 0's store: set "+
			"MASTER_ADDR to rank 0's host", c.WorldSize)
	default:
		addr = "127.0.0.1"
	}
	addr = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	if strings.ContainsAny(addr, " \t/[]") || (strings.Contains(addr, ":") && net.ParseIP(addr) == nil) {
		return invalid("MASTER_ADDR=%q is not a host name or IP address (put the port in MASTER_PORT)", addr)
	}
	c.MasterAddr = addr
	return nil
}

// secret reads GODDP_SECRET into c.
func (r reader) secret(c *Config) error {
	v, set := r.str("GODDP_SECRET")
	if !set {
		if c.WorldSize > 1 {
			return invalid("GODDP_SECRET is not set; a %d-rank job needs a shared secret of at least %d bytes (e.g. "+
				"GODDP_SECRET=$(openssl rand -hex 32))", c.WorldSize, wire.MinSecret)
		}
		return nil
	}
	c.Secret = decodeSecret(v)
	if len(c.Secret) < wire.MinSecret {
		return invalid("GODDP_SECRET is %d bytes; it must be at least %d", len(c.Secret), wire.MinSecret)
	}
	return nil
}

// decodeSecret applies the package's rule: hex that decodes to at least
// wire.MinSecret bytes is decoded, anything else is taken as it is.
func decodeSecret(v string) []byte {
	if b, err := hex.DecodeString(v); err == nil && len(b) >= wire.MinSecret {
		return b
	}
	return []byte(v)
}

// AgentPrefix is where goddp keeps its keys on torchrun's agent store
// (UseAgentStore): "goddp/RUN_ID/RESTART_COUNT", so that each restart of
// the workers (TORCHELASTIC_RESTART_COUNT) meets afresh, and neither
// torch's keys nor another run's collide with goddp's.
func (c Config) AgentPrefix() string {
	run := c.RunID
	if run == "" {
		run = "none" // torchrun's default --rdzv-id
	}
	return "goddp/" + run + "/" + strconv.Itoa(c.RestartCount)
}
