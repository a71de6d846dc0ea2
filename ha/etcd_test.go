package ha_test

import (
	"errors"
	"strings"
	"testing"

	"stratum.dev/stratum/ha"
)

func TestEtcdClusterVerdict(t *testing.T) {
	a, b, c := "https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"
	ok := func(ep string, id, leader uint64) ha.EtcdMemberHealth {
		return ha.EtcdMemberHealth{Endpoint: ep, ID: id, Leader: leader}
	}
	for _, tc := range []struct {
		name    string
		members []ha.EtcdMemberHealth
		named   []string // endpoints the error must name; nil: healthy
	}{
		{"all agree", []ha.EtcdMemberHealth{ok(a, 1, 1), ok(b, 2, 1), ok(c, 3, 1)}, nil},
		{"split: two sides each with a leader", []ha.EtcdMemberHealth{ok(a, 1, 1), ok(b, 2, 3), ok(c, 3, 3)}, []string{a, "split leadership"}},
		{"split: one against one", []ha.EtcdMemberHealth{ok(a, 1, 1), ok(b, 2, 2)}, []string{"split leadership"}},
		{"no leader", []ha.EtcdMemberHealth{ok(a, 1, 0), ok(b, 2, 3), ok(c, 3, 3)}, []string{a + " (member 1) knows no leader"}},
		{"did not answer", []ha.EtcdMemberHealth{ok(a, 1, 3), {Endpoint: b, Err: errors.New("refused")}, ok(c, 3, 3)}, []string{b + " did not answer: refused", "gone for good", "stratum etcd member remove NAME"}},
		{"none answered", []ha.EtcdMemberHealth{{Endpoint: a, Err: errors.New("x")}, {Endpoint: b, Err: errors.New("y")}}, []string{a, b}},
		{"alarm", []ha.EtcdMemberHealth{ok(a, 1, 1), {Endpoint: b, ID: 2, Leader: 1, Alarms: []string{"NOSPACE"}}}, []string{b, "NOSPACE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ha.ClusterVerdict(tc.members)
			if tc.named == nil {
				if err != nil {
					t.Fatalf("verdict = %v, want healthy", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("verdict healthy, want an error naming %v", tc.named)
			}
			for _, s := range tc.named {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("verdict %q does not name %q", err, s)
				}
			}
		})
	}
	for _, m := range []ha.EtcdMemberHealth{ok(a, 1, 0), {Endpoint: a, Err: errors.New("x"), Leader: 1}, {Endpoint: a, Leader: 1, Alarms: []string{"CORRUPT"}}} {
		if m.Healthy() {
			t.Errorf("%+v is Healthy", m)
		}
	}
	if !ok(a, 1, 1).Healthy() {
		t.Errorf("a member with a leader and no alarms is not Healthy")
	}
}
