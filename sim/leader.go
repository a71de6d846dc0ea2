package sim

import (
	"fmt"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
)

// leaderPoll is how often a member's leader reporter reads its view: a new
// leader is seen at once (etcd's LeaderChangedNotify), the loss of one within
// this.
const leaderPoll = 50 * time.Millisecond

// leaderView is what one member knows of its cluster's leader.
type leaderView struct {
	id   uint64 // 0: no leader
	term uint64
	// name and peerURL are the leader's, from the member's own member list;
	// empty when it has no entry for the leader.
	name, peerURL string
}

// reportLeader calls report each time the member's view of the leader
// changes (another leader, or the same one in a new term, or none), from the
// first leader it learns of until the member stops. It runs in a goroutine of
// its own, holds no lock of the member's, and ends when the member stops, so
// it never delays a stop; its reads (etcd's atomic lead and term) are cheap.
func (m *embeddedEtcd) reportLeader(report func(leaderView)) {
	srv := m.e.Server
	tick := time.NewTicker(leaderPoll)
	defer tick.Stop()
	var last leaderView
	for {
		lead, term := srv.Lead(), srv.Term()
		if lead != last.id || (lead != 0 && term != last.term) {
			v := leaderView{id: lead, term: term}
			if lead != 0 {
				if mem := srv.Cluster().Member(types.ID(lead)); mem != nil {
					v.name = mem.Name
					if len(mem.PeerURLs) > 0 {
						v.peerURL = mem.PeerURLs[0]
					}
				}
			}
			report(v)
			last = v
		}
		select {
		case <-m.done:
			return
		case <-srv.StoppingNotify():
			return
		case <-srv.StopNotify():
			return
		case <-srv.LeaderChangedNotify():
		case <-tick.C:
		}
	}
}

// recordLeader records a member's view of the leader as a "leader" event on
// its host: "etcd leader is now cpN (term T)" or "etcd has no leader". The
// leader is named by its host (found by peer URL), else by its member name,
// else by its member ID.
func (h *Host) recordLeader(v leaderView) {
	if v.id == 0 {
		h.cluster.events.Record(h.name, "leader", "etcd has no leader")
		return
	}
	name := v.name
	if lh := h.cluster.hostByPeerURL(v.peerURL); lh != nil {
		name = lh.name
	}
	if name == "" {
		name = fmt.Sprintf("%x", v.id)
	}
	h.cluster.events.Record(h.name, "leader", "etcd leader is now %s (term %d)", name, v.term)
}
