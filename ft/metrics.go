package ft

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Lighthouse's Prometheus metrics; a nil *metrics records
// nothing.
type metrics struct {
	id      prometheus.Gauge
	members prometheus.Gauge
	quorums prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		id: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ddp", Subsystem: "lighthouse", Name: "quorum_id",
			Help: "The id of the last quorum formed."}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ddp", Subsystem: "lighthouse",
			Name: "quorum_members", Help: "Replica groups in the last quorum formed."}),
		quorums: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "lighthouse",
			Name: "quorums_total", Help: "Quorums formed, fast or not."}),
	}
	for _, c := range []prometheus.Collector{m.id, m.members, m.quorums} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) formed(q Quorum) {
	if m == nil {
		return
	}
	m.id.Set(float64(q.ID))
	m.members.Set(float64(len(q.Members)))
	m.quorums.Inc()
}

// managerMetrics are a Manager's Prometheus metrics; a nil
// *managerMetrics records nothing.
type managerMetrics struct {
	committed, discarded prometheus.Counter
	participants         prometheus.Gauge
	quorumID             prometheus.Gauge
	quorumChanges        prometheus.Counter
	recoveries           prometheus.Counter
	recoveredBytes       prometheus.Counter
	recoverySeconds      prometheus.Counter
}

func newManagerMetrics(reg prometheus.Registerer) (*managerMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "ddp", Subsystem: "ft", Name: name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "ddp", Subsystem: "ft", Name: name, Help: help})
	}
	m := &managerMetrics{
		committed:       c("committed_steps_total", "Steps this replica committed with its quorum."),
		discarded:       c("discarded_steps_total", "Steps this replica discarded: a member failed or voted no."),
		participants:    g("participants", "Replicas contributing to the last step."),
		quorumID:        g("quorum_id", "The id of the quorum of the last step."),
		quorumChanges:   c("quorum_changes_total", "Process groups rebuilt for a new quorum."),
		recoveries:      c("recoveries_total", "States this replica recovered from a peer."),
		recoveredBytes:  c("recovered_bytes_total", "Bytes of state this replica recovered from peers."),
		recoverySeconds: c("recovery_seconds_total", "Seconds this replica spent fetching state from peers."),
	}
	for _, x := range []prometheus.Collector{m.committed, m.discarded, m.participants, m.quorumID, m.quorumChanges,
		m.recoveries, m.recoveredBytes, m.recoverySeconds} {
		if err := reg.Register(x); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *managerMetrics) quorumChanged(r Results) {
	if m == nil {
		return
	}
	m.quorumID.Set(float64(r.QuorumID))
	m.quorumChanges.Inc()
}

func (m *managerMetrics) stepped(ok bool, participants int) {
	if m == nil {
		return
	}
	m.participants.Set(float64(participants))
	if ok {
		m.committed.Inc()
	} else {
		m.discarded.Inc()
	}
}

func (m *managerMetrics) recovered(n int, took time.Duration) {
	if m == nil {
		return
	}
	m.recoveries.Inc()
	m.recoveredBytes.Add(float64(n))
	m.recoverySeconds.Add(took.Seconds())
}
