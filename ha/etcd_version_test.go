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
