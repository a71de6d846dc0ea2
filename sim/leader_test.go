package sim

import (
	"fmt"
	"regexp"
	"testing"
	"time"
)

var leaderEvent = regexp.MustCompile(`^etcd leader is now (\S+) \(term (\d+)\)$`)

// lastLeaderReports is each host's last "leader" event: the leader it names,
// "" for "etcd has no leader".
func lastLeaderReports(c *Cluster) map[string]string {
	out := map[string]string{}
	for _, e := range c.Events().Find("leader", "") {
		if m := leaderEvent.FindStringSubmatch(e.What); m != nil {
			out[e.Host] = m[1]
		} else if e.What == "etcd has no leader" {
			out[e.Host] = ""
		}
	}
	return out
}

// Each embedded member records its view of the leader, naming it by host;
// after the leader stops, the others record the new one, and the stopped
// member records nothing more.
func TestMembersRecordTheirLeader(t *testing.T) {
	c := Start(t, Config{ControlPlanes: 3, Etcd: FastEtcdTiming})
	hosts := c.Hosts()
	var leader string
	eventually(t, 5*time.Second, "every member reports the leader its status names", func() (bool, string) {
		names := map[uint64]string{}
		follows := map[string]uint64{}
		for _, h := range hosts {
			id, l, err := memberStatus(t, c, h)
			if err != nil {
				return false, fmt.Sprintf("status of %s: %v", h.Name(), err)
			}
			names[id], follows[h.Name()] = h.Name(), l
		}
		leader = names[follows["cp1"]]
		reports := lastLeaderReports(c)
		for _, h := range hosts {
			if leader == "" || names[follows[h.Name()]] != leader || reports[h.Name()] != leader {
				return false, fmt.Sprintf("reports %v, statuses %v", reports, follows)
			}
		}
		return true, ""
	})
	old := c.Host(leader)
	old.StopEtcd()
	stoppedAt := len(c.Events().Events())
	eventually(t, 5*time.Second, "the two others report a new leader", func() (bool, string) {
		reports := lastLeaderReports(c)
		var first string
		for _, h := range hosts {
			if h == old {
				continue
			}
			r := reports[h.Name()]
			if r == "" || r == leader || first != "" && r != first {
				return false, fmt.Sprint(reports)
			}
			first = r
		}
		return true, ""
	})
	time.Sleep(3 * leaderPoll)
	for _, e := range c.Events().Events()[stoppedAt:] {
		if e.Kind == "leader" && e.Host == old.Name() {
			t.Errorf("%s reported a leader after its member stopped: %v", old.Name(), e)
		}
	}
}
