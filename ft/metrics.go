package ft

import "github.com/prometheus/client_golang/prometheus"

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
