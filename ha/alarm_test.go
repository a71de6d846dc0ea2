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
