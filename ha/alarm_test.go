package ha

import (
	"strings"
	"testing"
)

// TestAlarmAdviceSaysWhatClearsIt: NOSPACE and CORRUPT each name what clears
// them (a wait or a restart clears neither); other alarms add nothing.
func TestAlarmAdviceSaysWhatClearsIt(t *testing.T) {
	for _, c := range []struct {
		alarms []string
		want   []string
	}{
		{[]string{"NOSPACE"}, []string{"stratum etcd defrag", "disarms", "compacts"}},
		{[]string{"CORRUPT"}, []string{"stratum etcd member remove", "stratum etcd rejoin"}},
		{[]string{"NOSPACE", "CORRUPT"}, []string{"stratum etcd defrag", "stratum etcd rejoin"}},
	} {
		got := alarmAdvice(c.alarms)
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("alarmAdvice(%v) = %q, want it to name %q", c.alarms, got, w)
			}
		}
	}
	if got := alarmAdvice([]string{"alarms unreadable (timeout)"}); got != "" {
		t.Errorf("alarmAdvice of no NOSPACE or CORRUPT = %q, want nothing", got)
	}
}

// TestHealthWaitReasonOnlyForWhatAWaitCures: a join's preflight judges the
// cluster again while the verdict is what a member restarting or an election
// shows, naming those members; an alarm raised anywhere is cleared by no
// wait, so it refuses at once.
func TestHealthWaitReasonOnlyForWhatAWaitCures(t *testing.T) {
	a, b, c := "https://10.0.0.1:2379", "https://10.0.0.2:2379", "https://10.0.0.3:2379"
	ok := func(ep string, id, leader uint64) EtcdMemberHealth {
		return EtcdMemberHealth{Endpoint: ep, ID: id, Leader: leader}
	}
	down := EtcdMemberHealth{Endpoint: b, Err: errNothingListens}
	for _, tc := range []struct {
		name    string
		members []EtcdMemberHealth
		want    string // "": refused at once
	}{
		{"a member restarting", []EtcdMemberHealth{ok(a, 1, 1), down, ok(c, 3, 1)}, b + " does not answer"},
		{"no quorum: the other knows no leader", []EtcdMemberHealth{ok(a, 1, 0), down}, a + " knows no leader; " + b + " does not answer"},
		{"an election under way", []EtcdMemberHealth{ok(a, 1, 1), ok(b, 2, 3), ok(c, 3, 3)}, a + " names another leader than most"},
		{"alarms unread for want of a quorum", []EtcdMemberHealth{{Endpoint: a, ID: 1, Leader: 1, Alarms: []string{alarmsUnreadable + " (context deadline exceeded)"}}, down}, a + "'s alarms went unread; " + b + " does not answer"},
		{"NOSPACE raised", []EtcdMemberHealth{ok(a, 1, 1), {Endpoint: b, ID: 2, Leader: 1, Alarms: []string{"NOSPACE"}}, ok(c, 3, 1)}, ""},
		{"CORRUPT raised beside a member down", []EtcdMemberHealth{down, {Endpoint: a, ID: 1, Leader: 1, Alarms: []string{"CORRUPT of member 3"}}}, ""},
		{"one unread, one raised", []EtcdMemberHealth{{Endpoint: a, ID: 1, Leader: 1, Alarms: []string{alarmsUnreadable + " (x)", "NOSPACE"}}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if clusterVerdict(tc.members) == nil {
				t.Fatalf("%v is healthy: not a case", tc.members)
			}
			if got := healthWaitReason(tc.members); got != tc.want {
				t.Errorf("healthWaitReason = %q, want %q", got, tc.want)
			}
		})
	}
}
