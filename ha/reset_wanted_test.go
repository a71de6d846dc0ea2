package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/supervisor"
	"stratum.dev/stratum/internal/version"
)

// supervisedDirHost is a dirHost whose services are a real supervisor's.
type supervisedDirHost struct {
	dirHost
	sup *supervisor.Supervisor
}

func (h supervisedDirHost) StartService(ctx context.Context, s string) error {
	return h.sup.StartService(ctx, s)
}
func (h supervisedDirHost) StopService(ctx context.Context, s string) error {
	return h.sup.StopService(ctx, s)
}
func (h supervisedDirHost) RestartService(ctx context.Context, s string) error {
	return h.sup.RestartService(ctx, s)
}
func (h supervisedDirHost) ServiceStatus(ctx context.Context, s string) (host.ServiceStatus, error) {
	return h.sup.ServiceStatus(ctx, s)
}

// TestWipesStopAServiceTheSupervisorStillRestarts: on a real host an etcd
// that keeps exiting (a member removed from its cluster) is still wanted by
// the supervisor, which relaunches it with backoff and reports it not
// running between launches. A reset's plan then has no stop for it; its
// wipe stops it all the same, so nothing relaunches it onto the removed
// files. It was left restarting, for good. A rejoin's wipe likewise.
func TestWipesStopAServiceTheSupervisorStillRestarts(t *testing.T) {
	d := &host.Dir{Root: t.TempDir()}
	sup, err := supervisor.New(supervisor.Config{Services: []supervisor.Spec{
		{Name: ServiceEtcd, Command: func() (supervisor.Command, error) {
			return supervisor.Command{Path: "/bin/sh", Args: []string{"-c", "exit 1"}}, nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Shutdown()
	h := supervisedDirHost{dirHost{d}, sup}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	restarting := func() {
		t.Helper()
		if err := sup.StartService(ctx, ServiceEtcd); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if st, _ := sup.ServiceStatus(ctx, ServiceEtcd); strings.HasPrefix(st.Detail, "restarting after") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the crash-looping etcd never showed as restarting")
			}
		}
	}
	restarting()
	if err := d.WriteFile(version.Kubeconfig("admin"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := NewNode(Env{Host: h}).ResetControlPlane(ctx, &out, true); err != nil {
		t.Fatalf("reset: %v\n%s", err, out.String())
	}
	if st, _ := sup.ServiceStatus(ctx, ServiceEtcd); st.Detail != "stopped" {
		t.Fatalf("after the reset the supervisor's etcd is %q, want stopped (nothing left to relaunch it)\n%s", st.Detail, out.String())
	}

	// A rejoin's wipe of stale data, planned with nothing running, too.
	restarting()
	if err := d.WriteFile(version.EtcdDataDir+"/member/snap/db", []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewNode(Env{Host: h}).rejoinStep(ctx, &out, rejoinWipe, nil, rejoinObservation{}, nil); err != nil {
		t.Fatalf("rejoin's wipe: %v", err)
	}
	if st, _ := sup.ServiceStatus(ctx, ServiceEtcd); st.Detail != "stopped" {
		t.Fatalf("after a rejoin's wipe the supervisor's etcd is %q, want stopped", st.Detail)
	}
}

// stopFailsHost is a dirHost whose service stops fail.
type stopFailsHost struct{ dirHost }

func (stopFailsHost) StopService(_ context.Context, s string) error {
	return errors.New("stop of " + s + " refused by the test")
}
func (stopFailsHost) ServiceStatus(_ context.Context, s string) (host.ServiceStatus, error) {
	return host.ServiceStatus{Name: s, Running: true}, nil
}

// TestRejoinWipeWhoseStopFailsLeavesTheDataAndSaysSo: a rejoin's wipe whose
// stop fails removes nothing and says the data is untouched
// (errDataUntouched), so the rejoin ends its data-replacement journal and
// `stratum up` is not refused for a replacement that never began.
func TestRejoinWipeWhoseStopFailsLeavesTheDataAndSaysSo(t *testing.T) {
	d := &host.Dir{Root: t.TempDir()}
	data := version.EtcdDataDir + "/member/snap/db"
	if err := d.WriteFile(data, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := NewNode(Env{Host: stopFailsHost{dirHost{d}}}).rejoinStep(context.Background(), &out, rejoinWipe, nil, rejoinObservation{}, nil)
	if !errors.Is(err, errDataUntouched) {
		t.Fatalf("a rejoin wipe whose stop failed = %v, want errDataUntouched", err)
	}
	if _, rerr := d.ReadFile(data); rerr != nil {
		t.Fatalf("a rejoin wipe whose stop failed removed the data: %v", rerr)
	}
}

// TestRejoinWipeWhoseStopFailsAfterTheStopStepSaysItIsStopped: a wipe whose
// own stop fails, after the rejoin's stop step stopped the control plane,
// ends this run's data-replacement journal (the data is untouched) and says
// the control plane is stopped and that `stratum up` starts it again; a
// rejoin that an earlier run's journal precedes keeps it and says nothing
// more.
func TestRejoinWipeWhoseStopFailsAfterTheStopStepSaysItIsStopped(t *testing.T) {
	n, d := newDirNode(t)
	if err := d.WriteFile(dataReplacePath, []byte(`{"op":"an etcd rejoin"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	stopFailed := fmt.Errorf("etcd rejoin: stop of etcd refused; the data is untouched (%w): re-run the same command", errDataUntouched)
	err := n.rejoinStepFailed(stopFailed, rejoinWipe, []rejoinStep{rejoinStop}, false)
	if !strings.Contains(err.Error(), "this node's control plane is stopped") || !strings.Contains(err.Error(), "`stratum up` starts it again") {
		t.Fatalf("a wipe whose stop failed after the stop step = %v; want the control plane said stopped and `stratum up` named", err)
	}
	if n.dataReplaceUnderWay() {
		t.Fatal("the journal of a rejoin whose data is untouched was left")
	}
	if err := d.WriteFile(dataReplacePath, []byte(`{"op":"an etcd rejoin"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.rejoinStepFailed(stopFailed, rejoinWipe, []rejoinStep{rejoinStop}, true); err != stopFailed || !n.dataReplaceUnderWay() {
		t.Fatalf("the same failure after an earlier run's journal = %v (journal left %t); want it as it was, the journal kept", err, n.dataReplaceUnderWay())
	}
}
