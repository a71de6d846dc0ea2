package ha

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestCiliumRolloutWarningKeepsTheLastState: a read cut short at the
// deadline (client-go's rate limiter refusing to wait past it) does not
// replace what the rollout was last seen doing in the warning.
func TestCiliumRolloutWarningKeepsTheLastState(t *testing.T) {
	one := int32(1)
	cs := fake.NewClientset(
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ciliumAgent, Namespace: ciliumNamespace}, Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: ciliumOperator, Namespace: ciliumNamespace}, Spec: appsv1.DeploymentSpec{Replicas: &one}},
	)
	reads := 0
	cs.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		reads++
		if reads > 2 { // the first poll reads both; every later read fails
			return true, nil, errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		}
		return false, nil, nil
	})
	n := &Node{log: slog.New(slog.DiscardHandler)}
	warnings, err := n.waitCiliumRollout(context.Background(), io.Discard, cs, 1500*time.Millisecond)
	if err != nil || len(warnings) != 2 || reads < 3 {
		t.Fatalf("%d reads, warnings %q, %v", reads, warnings, err)
	}
	for _, w := range warnings {
		if strings.Contains(w, "unreadable") || !strings.Contains(w, "updated") {
			t.Errorf("warning %q does not name the last state read", w)
		}
	}
}

// TestCiliumRolloutWaitStoppedSaysSo: a wait stopped (Ctrl-C) before the
// rollouts finished is an error that says the wait was stopped and the
// rollout goes on, not a timeout's warning; meanwhile the wait says what
// each rollout last reported.
func TestCiliumRolloutWaitStoppedSaysSo(t *testing.T) {
	one := int32(1)
	cs := fake.NewClientset(
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ciliumAgent, Namespace: ciliumNamespace}, Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: ciliumOperator, Namespace: ciliumNamespace}, Spec: appsv1.DeploymentSpec{Replicas: &one}},
	)
	var said []string
	n := &Node{log: slog.New(slog.DiscardHandler), env: Env{Progress: func(l string) { said = append(said, l) }}}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	warnings, err := n.waitCiliumRollout(ctx, io.Discard, cs, time.Hour)
	if err == nil || !strings.Contains(err.Error(), "stopped waiting for Cilium's rollout") || !strings.Contains(err.Error(), "0 of 2 updated") || len(warnings) != 0 {
		t.Fatalf("a wait stopped before the rollouts finished: warnings %q, %v; want an error saying it was stopped, naming the last state", warnings, err)
	}
	if len(said) == 0 || !strings.Contains(said[0], "waiting for Cilium's rollout onto the VIP") {
		t.Errorf("the wait said %q, want what the rollouts last reported", said)
	}
}
