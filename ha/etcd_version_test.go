package ha_test

import (
	"errors"
	"testing"

	"stratum.dev/stratum/ha"
)

func TestEtcdVersionSkewRule(t *testing.T) {
	for _, c := range []struct {
		local, cluster string
		refused        bool
	}{
		{"v3.7.3", "3.7.0", false},
		{"v3.7.3", "3.6.0", false}, // a newer member joins an older cluster
		{"v3.6.16", "3.7.0", true},
		{"v3.6.16", "3.6.0", false},
		{"v3.6.16", "4.0.0", true},
		{"v4.0.0", "3.7.0", false},
		{"v3.6.16", "not_decided", false}, // not judged
		{"", "3.7.0", false},
	} {
		err := ha.EtcdVersionSkew(c.local, c.cluster, "198.18.0.1")
		if got := err != nil; got != c.refused {
			t.Errorf("local %q, cluster %q: %v, want refused %v", c.local, c.cluster, err, c.refused)
		}
		if err != nil && !errors.Is(err, ha.ErrEtcdVersionSkew) {
			t.Errorf("local %q, cluster %q: %v does not match ErrEtcdVersionSkew", c.local, c.cluster, err)
		}
	}
}

// TestClusterVersionAhead: the version a new member must fit is the newer
// of the decided cluster version and the members' lowest server version,
// named with the member that shows it.
func TestClusterVersionAhead(t *testing.T) {
	type m = ha.MemberVersions
	for _, c := range []struct {
		name        string
		answers     []m
		version, at string
	}{
		{"decided", []m{{IP: "a", Server: "3.7.3", Cluster: "3.7.0"}}, "3.7.3", "a"}, // same major.minor
		// A snapshot of a 3.6 cluster restored by etcd 3.7: decided 3.6,
		// about to be raised to 3.7.
		{"restored by a newer etcd", []m{{IP: "a", Server: "3.7.3", Cluster: "3.6.0"}}, "3.7.3", "a"},
		{"mixed members keep the lowest", []m{{IP: "a", Server: "3.7.3", Cluster: "3.6.0"}, {IP: "b", Server: "3.6.16", Cluster: "3.6.0"}}, "3.6.16", "b"},
		{"undecided", []m{{IP: "a", Server: "3.7.3", Cluster: "not_decided"}}, "3.7.3", "a"},
		{"decided above the lowest server", []m{{IP: "a", Server: "3.6.16", Cluster: "3.7.0"}, {IP: "b", Server: "3.7.3", Cluster: "3.7.0"}}, "3.7.0", "a"},
		{"unparsable server passed over", []m{{IP: "a", Server: "", Cluster: "3.6.0"}, {IP: "b", Server: "3.7.3", Cluster: "3.6.0"}}, "3.7.3", "b"},
	} {
		v, at := ha.ClusterVersionAhead(c.answers)
		if v != c.version || at != c.at {
			t.Errorf("%s: %q at %q, want %q at %q", c.name, v, at, c.version, c.at)
		}
	}
}
