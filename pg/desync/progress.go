package desync

import (
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/goddp/ddp/pg"
)

// recentLen is how many of its last collectives a rank remembers and
// publishes, so that a diagnosis can compare what ranks issued at the
// stalled position even if some have gone a few collectives further.
const recentLen = 32

// maxReport caps the size of a peer's published progress that is read.
const maxReport = 64 << 10

// progress is one rank's record of its collectives: the last it entered
// (issued) and the last up to which all had finished, with the
// fingerprints of the most recent ones. The Group guards it with its mu.
type progress struct {
	entered  uint64
	op       pg.OpType
	finished uint64
	recent   [recentLen]entry // ring, by seq % recentLen
}

type entry struct {
	seq uint64
	fp  fingerprint
}

func (p *progress) enter(seq uint64, fp fingerprint) {
	p.entered, p.op = seq, fp.op
	p.recent[seq%recentLen] = entry{seq, fp}
}

func (p *progress) at(seq uint64) (fingerprint, bool) {
	e := p.recent[seq%recentLen]
	return e.fp, seq != 0 && e.seq == seq
}

// report is the published form of a rank's progress (JSON in the store).
type report struct {
	Rank     int           `json:"rank"`
	Entered  uint64        `json:"entered"`
	Op       uint8         `json:"op"`
	Finished uint64        `json:"finished"`
	Recent   []reportEntry `json:"recent"`
}

type reportEntry struct {
	Seq uint64 `json:"seq"`
	FP  string `json:"fp"` // hex of the encoded fingerprint
}

func (p *progress) report(rank int) report {
	r := report{Rank: rank, Entered: p.entered, Op: uint8(p.op), Finished: p.finished}
	for _, e := range p.recent {
		if e.seq != 0 {
			r.Recent = append(r.Recent, reportEntry{Seq: e.seq, FP: hex.EncodeToString(e.fp.encode())})
		}
	}
	return r
}

// parseReport decodes rank's published progress; it never panics on
// what a peer wrote.
func parseReport(b []byte, rank int) (*progress, error) {
	if len(b) > maxReport {
		return nil, fmt.Errorf("rank %d's progress report is %d bytes, over the %d-byte cap", rank, len(b), maxReport)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("rank %d's progress report: %w", rank, err)
	}
	if r.Rank != rank {
		return nil, fmt.Errorf("rank %d's progress report says it is from rank %d", rank, r.Rank)
	}
	p := &progress{entered: r.Entered, op: pg.OpType(r.Op), finished: r.Finished}
	for _, e := range r.Recent {
		b, err := hex.DecodeString(e.FP)
		if err != nil || e.Seq == 0 {
			continue
		}
		p.recent[e.Seq%recentLen] = entry{e.Seq, decodeFingerprint(b)}
	}
	return p, nil
}
