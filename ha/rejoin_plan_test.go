package ha

import (
	"strings"
	"testing"
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
