package dist

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	nccl "github.com/goddp/ddp/libnccl"
	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/backend"
	"github.com/goddp/ddp/pg/env"
	pgnccl "github.com/goddp/ddp/pg/nccl"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
	"go.uber.org/zap"
)

// ErrBackendUnavailable: the backend Options asked for cannot run in
// this binary or on this machine (mpi without -tags mpi, nccl without the
// library). The error says what to install or set.
var ErrBackendUnavailable = errors.New("dist: the process-group backend is not available here")

// Options configure InitProcessGroup. The zero value joins the job
// that whichever launcher started this process describes, over tcp.
type Options struct {
	// Backend is "tcp" (pure Go; shared memory between ranks of a host),
	// "nccl" (GPUs; NCCL loaded at run time) or "mpi" (Open MPI; the
	// binary must be built with -tags mpi). Empty means "mpi" in a binary
	// built with -tags mpi that mpirun started, and "tcp" otherwise.
	Backend string
	// Env is this process's place in the job. nil means read it through
	// Lookup (pg/env: torchrun, Slurm, Open MPI, Kubernetes, or RANK,
	// WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GODDP_SECRET set by hand).
	Env *env.Config
	// Lookup reads environment variables. nil means os.LookupEnv: the one
	// place a library of goddp reads the environment, as torch's
	// init_process_group does with init_method "env://". Pass a function
	// (or Env) to keep it away from the process's environment.
	Lookup func(string) (string, bool)
	// Timeout bounds the rendezvous and is the group timeout: a collective
	// not finished this long after it was issued fails on every rank.
	// Zero means pg.DefaultTimeout (30 minutes, torch's default).
	Timeout time.Duration
	// TCP tunes the tcp backend. Rank, Size, Secret and Timeout come from
	// the job and Timeout above. An empty ListenAddr listens on loopback
	// when the store is on loopback (a one-host job), else on every
	// interface, advertising the address that routes to the store.
	TCP tcp.Options
	// NCCL tunes the nccl backend. Rank and Size come from the job, Device
	// is LOCAL_RANK unless NCCL.Device is set positive, and a nil Library
	// loads NCCL and the CUDA driver as nccl.LoadFromEnv says.
	NCCL pgnccl.Options
	// MPIAbortGrace is, for the mpi backend, how long after a collective
	// times out MPI_Abort ends the job (mpi.Options.AbortGrace); give a
	// wrapper that diagnoses the timeout (pg/desync) time to finish.
	// Zero means mpi's default, 1 s.
	MPIAbortGrace time.Duration
	// Logger receives the rendezvous and the group's events; nil is none.
	Logger *zap.Logger
}

// Group is a process group that InitProcessGroup joined: the group, the
// job's description, and the store its ranks met through, which lives as
// long as the group (wrappers such as pg/desync keep state in it). It is a
// pg.ProcessGroup, and pg.As finds the backend's abilities behind it.
type Group struct {
	pg.ProcessGroup
	env       env.Config
	store     store.Store
	storeHost int
	closer    io.Closer
}

// Inner returns the backend's group: see pg.Wrapper.
func (g *Group) Inner() pg.ProcessGroup { return g.ProcessGroup }

// Env returns this process's place in the job.
func (g *Group) Env() env.Config { return g.env }

// Store returns the rendezvous store: goddp's TCPStore hosted by rank 0,
// or torchrun's agent store under env.Config.AgentPrefix. An mpi job
// meets through MPI itself; its store, hosted by rank 0 and found over
// MPI (mpi.NewStore), serves wrappers such as pg/desync.
func (g *Group) Store() store.Store { return g.store }

// StoreHost returns the rank whose process hosts the store: 0, or
// pg.NoPeer when torchrun's agent serves it.
func (g *Group) StoreHost() int { return g.storeHost }

// Close leaves the group, then the store.
func (g *Group) Close() error {
	err := g.ProcessGroup.Close()
	if g.closer != nil {
		err = errors.Join(err, g.closer.Close())
	}
	return err
}

// InitProcessGroup joins this process to its job and returns the ready
// process group: torch.distributed.init_process_group for goddp. It reads
// the job from the launcher's environment (Env, else Lookup), meets the
// other ranks through a store (goddp's authenticated TCPStore hosted by
// rank 0, or torchrun's agent store when TORCHELASTIC_USE_AGENT_STORE is
// set), and builds the backend's group, whose connections prove the job's
// secret (GODDP_SECRET). It is collective: every rank calls it.
//
//	g, err := dist.InitProcessGroup(ctx, dist.Options{})
//	if err != nil { ... }
//	defer g.Close()
//	d, err := ddp.Wrap(ctx, g, params, ddp.Options{}) // Gorgonia; gomlxddp.New for GoMLX
//
// The same program then runs unchanged under ddp-train --nproc N, torchrun,
// mpirun (with MASTER_ADDR exported, or -tags mpi), srun and Kubernetes.
func InitProcessGroup(ctx context.Context, o Options) (*Group, error) {
	if err := backend.CheckContext(ctx); err != nil {
		return nil, fmt.Errorf("dist: InitProcessGroup: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = pg.DefaultTimeout
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	name := o.Backend
	if name == "" {
		name = o.autoBackend()
	}
	if name == "mpi" {
		return joinMPI(ctx, o) // MPI knows the ranks: no store, no MASTER_ADDR (init_mpi.go, or its stub)
	}
	e, err := o.job()
	if err != nil {
		return nil, err
	}
	switch name {
	case "tcp":
		return joinTCP(ctx, e, o)
	case "nccl":
		return joinNCCL(ctx, e, o)
	}
	return nil, fmt.Errorf("%w: dist: Options.Backend %q: want tcp, nccl or mpi", pg.ErrInvalidArgument, name)
}

// autoBackend is the empty Backend's choice: mpi in a binary built with
// -tags mpi that mpirun started, tcp otherwise.
func (o Options) autoBackend() string {
	if !mpiBuilt {
		return "tcp"
	}
	if o.Env != nil {
		if o.Env.Source == env.SourceMPI {
			return "mpi"
		}
		return "tcp"
	}
	if _, set := o.lookup()("OMPI_COMM_WORLD_SIZE"); set {
		return "mpi"
	}
	return "tcp"
}

// job is the job's description: Env, else read through Lookup.
func (o Options) job() (env.Config, error) {
	if o.Env != nil {
		return *o.Env, nil
	}
	return env.FromLookup(o.lookup())
}

// meet connects to the job's store: goddp's TCPStore at the master
// address, hosted by rank 0, or torchrun's agent store, which is
// unauthenticated, so only addresses go through it and the ranks'
// connections still prove the secret.
func meet(ctx context.Context, e *env.Config, o Options) (*Group, error) {
	g := &Group{env: *e}
	if e.WorldSize == 1 && !e.UseAgentStore {
		// A job of one process has no peer to meet or to prove a secret
		// to: an in-memory store, and a secret of its own.
		if len(e.Secret) == 0 {
			e.Secret = make([]byte, 32)
			if _, err := rand.Read(e.Secret); err != nil {
				return nil, err
			}
		}
		hs := store.NewHashStore(store.HashStoreOptions{Timeout: o.Timeout})
		g.store, g.closer, g.storeHost, g.env.Secret = hs, hs, 0, e.Secret
		return g, nil
	}
	if !e.UseAgentStore {
		st, err := store.NewTCPStore(ctx, store.TCPStoreOptions{
			Addr: e.StoreAddr(), ListenAddr: e.StoreListenAddr(), IsServer: e.IsStoreHost(),
			Secret: e.Secret, Timeout: o.Timeout, Logger: o.Logger,
		})
		if err != nil {
			return nil, fmt.Errorf("rank %d: rendezvous at %s: %w", e.Rank, e.StoreAddr(), err)
		}
		g.store, g.closer = st, st
		return g, nil
	}
	if len(e.Secret) == 0 {
		if e.WorldSize > 1 {
			return nil, fmt.Errorf("%w: rank %d: torchrun's agent store is unauthenticated, so goddp does not pass its secret "+
				"through it: export GODDP_SECRET (e.g. export GODDP_SECRET=$(openssl rand -hex 32)) where torchrun runs, the "+
				"same on every node", pg.ErrInvalidArgument, e.Rank)
		}
		e.Secret = make([]byte, 32) // one rank: no peer to share it with
		if _, err := rand.Read(e.Secret); err != nil {
			return nil, err
		}
		g.env.Secret = e.Secret
	}
	c, err := store.DialC10d(ctx, e.StoreAddr(), store.C10dOptions{Timeout: o.Timeout, Logger: o.Logger})
	if err != nil {
		return nil, fmt.Errorf("rank %d: rendezvous through torchrun's agent store at %s: %w", e.Rank, e.StoreAddr(), err)
	}
	prefix := e.AgentPrefix()
	o.Logger.Info("rendezvous through torchrun's agent store", zap.String("addr", e.StoreAddr()),
		zap.Stringer("protocol", c.Protocol()), zap.String("prefix", prefix+"/"))
	g.store, g.closer, g.storeHost = store.NewPrefixStore(prefix, c), c, pg.NoPeer
	return g, nil
}

// joinTCP meets the job and builds the tcp group.
func joinTCP(ctx context.Context, e env.Config, o Options) (*Group, error) {
	g, err := meet(ctx, &e, o)
	if err != nil {
		return nil, err
	}
	opts := o.TCP
	opts.Rank, opts.Size, opts.Secret, opts.Timeout = e.Rank, e.WorldSize, e.Secret, o.Timeout
	if opts.ListenAddr == "" {
		opts.ListenAddr, opts.AdvertiseAddr = peerAddrs(e)
	}
	if opts.Logger == nil {
		opts.Logger = o.Logger
	}
	tg, err := tcp.New(ctx, g.store, opts)
	if err != nil {
		g.closer.Close()
		return nil, fmt.Errorf("rank %d: joining the process group: %w", e.Rank, err)
	}
	g.ProcessGroup = tg
	return g, nil
}

// peerAddrs picks where a rank listens for its peers and the address it
// publishes: loopback for a job whose store is on loopback (one host),
// else every interface and the local address that routes to the store.
func peerAddrs(e env.Config) (listen, advertise string) {
	if ip := net.ParseIP(e.MasterAddr); e.MasterAddr == "localhost" || (ip != nil && ip.IsLoopback()) {
		return "127.0.0.1:0", ""
	}
	conn, err := net.Dial("udp", e.StoreAddr()) // no packet is sent: this only picks a route
	if err != nil {
		return "0.0.0.0:0", ""
	}
	defer conn.Close()
	host := conn.LocalAddr().(*net.UDPAddr).IP.String()
	return net.JoinHostPort(host, "0"), ""
}

// joinNCCL meets the job as tcp does and makes the NCCL group on GPU
// LOCAL_RANK (or NCCL.Device).
func joinNCCL(ctx context.Context, e env.Config, o Options) (*Group, error) {
	opts, err := ncclEnv(o.NCCL, o.lookup())
	if err != nil {
		return nil, err
	}
	if opts.Library == nil {
		getenv := func(name string) string { v, _ := o.lookup()(name); return v }
		lib, cu, err := nccl.LoadFromEnv(getenv)
		if err != nil {
			return nil, fmt.Errorf("%w: nccl: %v", ErrBackendUnavailable, err)
		}
		opts.Library, opts.CUDA = lib, cu
	}
	g, err := meet(ctx, &e, o)
	if err != nil {
		return nil, err
	}
	opts.Rank, opts.Size, opts.Timeout = e.Rank, e.WorldSize, o.Timeout
	if opts.Device <= 0 {
		opts.Device = e.LocalRank
	}
	if opts.Logger == nil {
		opts.Logger = o.Logger
	}
	ng, err := pgnccl.New(ctx, g.store, opts)
	if err != nil {
		g.closer.Close()
		return nil, fmt.Errorf("rank %d: joining the NCCL process group on GPU %d: %w", e.Rank, opts.Device, err)
	}
	o.Logger.Info("nccl process group", zap.Stringer("nccl", opts.Library.Version()),
		zap.String("library", opts.Library.Path()),
		zap.Int("device", opts.Device))
	g.ProcessGroup = ng
	return g, nil
}

// ncclEnv applies torch's TORCH_NCCL_ENABLE_TIMING to opts, as
// ProcessGroupNCCL reads it: set to a true value, every collective gets
// timing events and its flight-recorder entry a duration_ms. An option set
// in code wins; a value that is not a boolean is an error, not ignored.
func ncclEnv(opts pgnccl.Options, lookup func(string) (string, bool)) (pgnccl.Options, error) {
	const name = "TORCH_NCCL_ENABLE_TIMING"
	v, ok := lookup(name)
	if !ok || v == "" || opts.EnableTiming {
		return opts, nil
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return opts, fmt.Errorf("%w: %s=%q: want 1 or 0 (true or false)", pg.ErrInvalidArgument, name, v)
	}
	opts.EnableTiming = on
	return opts, nil
}

// lookup is Lookup, or os.LookupEnv.
func (o Options) lookup() func(string) (string, bool) {
	if o.Lookup != nil {
		return o.Lookup
	}
	return os.LookupEnv
}
