package ha

import (
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestEtcdErrIsTakesNoLongerDescription: etcd's refusal of a promotion whose
// learner has not caught up ("can only promote a learner member which is in
// sync with leader") begins with the text of its answer for a member that is
// no learner ("can only promote a learner member"). The promotion took the
// first for the second, and so ended as done, its member still a learner
// (a CI run's TestPromoteWaitsOutAQuorumLostForAMoment). Each is matched
// only by itself, however the answer reaches the caller: the client's
// value, the gRPC status the server sends, wrapped, or kept only as text.
func TestEtcdErrIsTakesNoLongerDescription(t *testing.T) {
	notReady, notLearner := rpctypes.ErrMemberLearnerNotReady, rpctypes.ErrMemberNotLearner
	timedOut, leaderFail := rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail
	for _, tc := range []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{"not ready is not not-a-learner", notReady, notLearner, false},
		{"not ready is itself", notReady, notReady, true},
		{"not-a-learner is itself", notLearner, notLearner, true},
		{"not-a-learner is not not-ready", notLearner, notReady, false},
		{"the server's status, not ready", rpctypes.ErrGRPCLearnerNotReady, notLearner, false},
		{"the server's status, not-a-learner", rpctypes.ErrGRPCMemberNotLearner, notLearner, true},
		{"wrapped, not ready", fmt.Errorf("promote through x: %w", notReady), notLearner, false},
		{"wrapped status, not ready", fmt.Errorf("promote: %w", rpctypes.ErrGRPCLearnerNotReady), notLearner, false},
		{"wrapped, not-a-learner", fmt.Errorf("promote through x: %w", notLearner), notLearner, true},
		{"text only, not ready", fmt.Errorf("promote (last refusal: %v)", notReady), notLearner, false},
		{"text only, not-a-learner", fmt.Errorf("promote (last refusal: %v)", notLearner), notLearner, true},
		{"text only, at the end", errors.New("member promote: " + notLearner.Error()), notLearner, true},
		{"a longer timeout is not the plain one", leaderFail, timedOut, false},
		{"text only, a longer timeout", fmt.Errorf("put: %v", leaderFail), timedOut, false},
		{"text only, the plain timeout", fmt.Errorf("put: %v; retry", timedOut), timedOut, true},
		{"nil", nil, notLearner, false},
	} {
		if got := etcdErrIs(tc.err, tc.target); got != tc.want {
			t.Errorf("%s: etcdErrIs(%v, %v) = %t, want %t", tc.name, tc.err, tc.target, got, tc.want)
		}
	}
}

// TestEveryEtcdTimeoutIsUnreachable: etcd's server-side timeouts are one
// text and its three longer variants (the last reaches the client as a gRPC
// status, not an rpctypes value); each means the member did not answer in
// time, so another is asked, now that one text no longer matches the others.
func TestEveryEtcdTimeoutIsUnreachable(t *testing.T) {
	for _, err := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex} {
		if !unreachable(err) || !unreachable(fmt.Errorf("member list from x: %w", err)) {
			t.Errorf("unreachable(%v) = false, want true: another member is asked", err)
		}
	}
}
