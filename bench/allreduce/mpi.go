//go:build mpi

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/goddp/ddp/pg"
	"github.com/goddp/ddp/pg/mpi"
	"github.com/goddp/ddp/pg/store"
	"github.com/goddp/ddp/pg/tcp"
)

// runMPI is one rank of --backend mpi, started by mpirun -np N: it
// measures the MPI process group and then, in the same job and on the
// same processes, a tcp group on loopback that meets through a TCPStore
// whose port and secret rank 0 broadcasts over MPI, and prints the busbw
// ratio mpi/tcp for every row.
func runMPI(ctx context.Context, o options, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, o.job.Timeout)
	defer cancel()
	g, err := mpi.New(ctx, mpi.Options{Timeout: o.job.Timeout})
	if err != nil {
		return fmt.Errorf("--backend mpi: %w (start the benchmark with mpirun -np N)", err)
	}
	defer g.Close()
	if g.Rank() == 0 {
		fmt.Fprintf(stdout, "# backend mpi: %s, %d ranks\n", mpi.LibraryVersion(g), g.Size())
	}
	mpiRows, err := measure(ctx, g, o.cfg, stdout)
	if err != nil {
		return err
	}
	tg, closeTCP, err := joinTCPOverMPI(ctx, g, o)
	if err != nil {
		return err
	}
	defer closeTCP()
	if g.Rank() == 0 {
		fmt.Fprintf(stdout, "# backend tcp (loopback), %d ranks, same processes\n", tg.Size())
	}
	tcpRows, err := measure(ctx, tg, o.cfg, stdout)
	if err != nil {
		return err
	}
	if g.Rank() == 0 && len(mpiRows) == len(tcpRows) {
		fmt.Fprintln(stdout, "# op,bytes,mpi_busbw_GBps,tcp_busbw_GBps,mpi/tcp,mpi_us,tcp_us")
		for i, m := range mpiRows {
			t := tcpRows[i]
			// mpi/tcp is the busbw ratio, tcp's time over mpi's, which
			// also holds for a barrier, that moves no bytes.
			ratio := 0.0
			if m.perIter > 0 {
				ratio = float64(t.perIter) / float64(m.perIter)
			}
			fmt.Fprintf(stdout, "# %s,%d,%.3f,%.3f,%.2f,%.2f,%.2f\n", m.op.name, m.bytes, m.busbw(), t.busbw(), ratio,
				float64(m.perIter.Nanoseconds())/1e3, float64(t.perIter.Nanoseconds())/1e3)
		}
	}
	return nil
}

// joinTCPOverMPI makes a tcp group of the MPI job's ranks: rank 0 hosts a
// TCPStore on a free loopback port and broadcasts the port and a fresh
// secret to the others over MPI.
func joinTCPOverMPI(ctx context.Context, g *mpi.Group, o options) (pg.ProcessGroup, func(), error) {
	hello := make([]byte, 2+32)
	if g.Rank() == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		hello[0], hello[1] = byte(port>>8), byte(port)
		if _, err := rand.Read(hello[2:]); err != nil {
			return nil, nil, err
		}
	}
	if err := g.Broadcast(ctx, pg.Uint8s(hello), 0).Wait(ctx); err != nil {
		return nil, nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(hello[0])<<8|int(hello[1])))
	secret := hello[2:]
	st, err := store.NewTCPStore(ctx,
		store.TCPStoreOptions{Addr: addr, IsServer: g.Rank() == 0, Secret: secret, Timeout: o.job.Timeout})
	if err != nil {
		return nil, nil, fmt.Errorf("rank %d: tcp store at %s: %w", g.Rank(), addr, err)
	}
	tg, err := tcp.New(ctx, st,
		tcp.Options{Rank: g.Rank(), Size: g.Size(), Secret: secret, ListenAddr: "127.0.0.1:0", Timeout: o.job.Timeout,
			LinkBytesPerSec: o.job.LinkBytesPerSec})
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return tg, func() { tg.Close(); st.Close() }, nil
}
