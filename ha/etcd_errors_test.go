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

// TestEveryEtcdUnavailableIsUnreachable: etcd's server-side timeouts (one
// text and its three longer variants, the last reaching the client as a
// gRPC status, not an rpctypes value), a member stopping and one between
// leaders each mean the member did not answer, so another is asked: the
// client hands them over as rpctypes values, which carry no gRPC status,
// and "server stopped" and "leader changed" ended a promotion, a removal or
// a join's add at the first endpoint. An unhealthy cluster's refusal, though
// Unavailable too, is an answer.
func TestEveryEtcdUnavailableIsUnreachable(t *testing.T) {
	for _, err := range []error{rpctypes.ErrTimeout, rpctypes.ErrTimeoutDueToLeaderFail,
		rpctypes.ErrTimeoutDueToConnectionLost, rpctypes.ErrTimeoutWaitAppliedIndex,
		rpctypes.ErrStopped, rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader} {
		if !unreachable(err) || !unreachable(fmt.Errorf("member list from x: %w", err)) {
			t.Errorf("unreachable(%v) = false, want true: another member is asked", err)
		}
	}
	if unreachable(rpctypes.ErrUnhealthy) || unreachable(fmt.Errorf("add: %w", rpctypes.ErrUnhealthy)) {
		t.Error("etcd's unhealthy-cluster refusal taken for a member that did not answer")
	}
}
