package ha

import (
	"errors"
	"slices"
	"testing"
)

// TestResetPlanStartsEtcdOnlyWhenItCanHelp: a re-run with no member
// answering starts this node's etcd first only when the node state still
// records a member the reset has not removed, its etcd is not running, and
// the run is not forced; otherwise it is refused as no member answering.
func TestResetPlanStartsEtcdOnlyWhenItCanHelp(t *testing.T) {
	crashed := func() resetObservation {
		return resetObservation{name: "cp2", peerURL: "https://10.0.0.12:2380", asked: []string{"10.0.0.11", "10.0.0.12"},
			role: "unknown", running: map[string]bool{}, filesLeft: true, journalUnderWay: true, stateSaved: true, mayStartEtcd: true}
	}
	for _, tc := range []struct {
		name    string
		change  func(*resetObservation)
		restart bool
	}{
		{"crashed before its member-remove", func(*resetObservation) {}, true},
		{"the VIP candidate running again", func(o *resetObservation) { o.running[ServiceVIP] = true }, true},
		{"forced", func(o *resetObservation) { o.mayStartEtcd = false }, false},
		{"the member removed already", func(o *resetObservation) { o.removed = true }, false},
		{"its etcd running", func(o *resetObservation) { o.running[ServiceEtcd] = true }, false},
		{"no node state (a join's journal)", func(o *resetObservation) { o.stateSaved = false }, false},
		{"no reset journal (a first run)", func(o *resetObservation) { o.journalUnderWay = false }, false},
		{"a reset journal that cannot be parsed (its removal unknown)", func(o *resetObservation) {
			o.journalUnreadable = errors.New("the reset journal cannot be parsed")
		}, false},
	} {
		o := crashed()
		tc.change(&o)
		rep := planReset(o)
		if got := slices.Contains(rep.Steps, string(resetStartEtcd)); got != tc.restart {
			t.Errorf("%s: plan %v (refused %q), start-etcd %v, want %v", tc.name, rep.Steps, rep.Refused, got, tc.restart)
		}
		if tc.restart == (rep.Refused != "") {
			t.Errorf("%s: refused %q with start-etcd %v: a plan that restarts etcd is not refused, one that cannot is", tc.name, rep.Refused, tc.restart)
		}
	}
}

// TestResetPlanQuorumAfter: the quorum of the voters a reset leaves is a
// majority of them, and none when it leaves none (a node with nothing of a
// control plane, or the last voter) rather than a quorum of 1 among 0.
func TestResetPlanQuorumAfter(t *testing.T) {
	for _, tc := range []struct{ voters, quorum int }{{0, 0}, {1, 1}, {2, 2}, {3, 2}, {4, 3}} {
		rep := planReset(resetObservation{role: "voter", running: map[string]bool{}, votersAfter: tc.voters, healthyAfter: tc.voters})
		if rep.VotersAfter != tc.voters || rep.QuorumAfter != tc.quorum {
			t.Errorf("%d voters after: plan has %d voters, quorum %d; want quorum %d", tc.voters, rep.VotersAfter, rep.QuorumAfter, tc.quorum)
		}
	}
}
