package ha

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"stratum.dev/stratum/internal/host"
)

func TestPlanRejoin(t *testing.T) {
	const seed, old = "5eed", "01d"
	for _, tc := range []struct {
		name string
		o    rejoinObservation
		want string
	}{
		{"stale member running on old data",
			rejoinObservation{SeedClusterID: seed, LocalClusterID: old, Running: true},
			"stop wipe member-add state-save start"},
		{"crashed after the stop: nothing runs, data still there",
			rejoinObservation{SeedClusterID: seed},
			"wipe member-add state-save start"},
		{"crashed after the wipe",
			rejoinObservation{SeedClusterID: seed, DataDirEmpty: true},
			"member-add state-save start"},
		{"crashed after the member-add: an unstarted learner, old state",
			rejoinObservation{SeedClusterID: seed, Self: seedUnstarted, DataDirEmpty: true},
			"member-add state-save start"},
		{"crashed after the state save",
			rejoinObservation{SeedClusterID: seed, Self: seedUnstarted, StateJoined: true, DataDirEmpty: true},
			"start"},
		{"started, not yet promoted, etcd down",
			rejoinObservation{SeedClusterID: seed, Self: seedStarted, StateJoined: true},
			"start"},
		// A joined member's disk lost or not mounted: its member is still
		// the seed's, its state says joined, but it cannot start on no
		// data (up refuses it, ErrEtcdDataMissing, and advises this).
		{"a member of the seed whose data is lost",
			rejoinObservation{SeedClusterID: seed, Self: seedStarted, StateJoined: true, DataDirEmpty: true, DataLost: true},
			"member-remove member-add state-save start"},
		{"already a member of the seed's cluster, running",
			rejoinObservation{SeedClusterID: seed, Self: seedStarted, LocalClusterID: seed, Running: true},
			"start"},
		{"the seed knows a started member of ours, but our data is another cluster's",
			rejoinObservation{SeedClusterID: seed, Self: seedStarted, LocalClusterID: old, Running: true},
			"stop wipe member-remove member-add state-save start"},
		{"state says joined, but the running etcd is another cluster's",
			rejoinObservation{SeedClusterID: seed, Self: seedUnstarted, StateJoined: true, LocalClusterID: old, Running: true},
			"stop wipe member-add state-save start"},
		{"state joined an earlier seed (restored again since)",
			rejoinObservation{SeedClusterID: seed, DataDirEmpty: false},
			"wipe member-add state-save start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range planRejoin(tc.o) {
				got = append(got, string(s))
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("planRejoin(%+v) = %s, want %s", tc.o, g, tc.want)
			}
		})
	}
}

// TestDryRunsRefuseAnUnfinishedReset: the dry runs of a rejoin and of a
// restore meet the refusal the operations meet on a node whose reset has
// not finished, before they look at anything else.
func TestDryRunsRefuseAnUnfinishedReset(t *testing.T) {
	h := &host.Local{Dir: host.Dir{Root: t.TempDir()}}
	if err := h.WriteFile(resetJournalPath, []byte(`{"name":"cp2"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	n := NewNode(Env{Host: h})
	rep, err := n.RejoinPlanOf(context.Background(), "10.0.0.1", false)
	if !errors.Is(err, ErrResetUnderWay) || !IsRefusal(err) || !strings.Contains(rep.Refused, "run `stratum reset` to finish it first") {
		t.Fatalf("rejoin dry run during a reset: %v (refused %q), want ErrResetUnderWay", err, rep.Refused)
	}
	if err := n.SnapshotRestorePlan(context.Background(), io.Discard, "/nonexistent.db"); !errors.Is(err, ErrResetUnderWay) || !IsRefusal(err) {
		t.Fatalf("restore dry run during a reset: %v, want ErrResetUnderWay", err)
	}
}
