package ha_test

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/interrupt"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
)

// clusterIDOf is the etcd cluster ID the member on name reports.
func (j *joinCluster) clusterIDOf(name string) uint64 {
	j.t.Helper()
	h := j.c.Host(name)
	cli, err := h.EtcdClient()
	if err != nil {
		j.t.Fatal(err)
	}
	defer cli.Close()
	st, err := cli.Status(j.ctx, h.ClientURL())
	if err != nil {
		j.t.Fatalf("status of %s: %v", name, err)
	}
	return st.Header.ClusterId
}

// checkSafe is the join's safety invariant while a join is in flight or
// crashed: cp1 is a voter, and a member for cp2 exists only while cp2 holds
// the intent journal or its node state.
func (j *joinCluster) checkSafe() {
	j.t.Helper()
	ms := j.members()
	if len(ms) == 1 && ms[0] == "cp1:voter" {
		return
	}
	cp2 := j.c.Host("cp2")
	_, intentErr := cp2.Files().ReadFile(ha.JoinIntentPath())
	_, stateErr := cp2.Files().ReadFile(nodestate.Path)
	if intentErr != nil && stateErr != nil {
		j.t.Fatalf("members %v, but cp2 holds neither an intent journal nor node state (an orphan member)", ms)
	}
	if len(ms) > 2 {
		j.t.Fatalf("members %v: a duplicate add", ms)
	}
}

// checkJoined: two voters, one cluster ID, the journal cleared, the data
// written before the join readable through cp2's apiserver.
func (j *joinCluster) checkJoined() {
	j.t.Helper()
	if got := strings.Join(j.members(), " "); got != "cp1:voter cp2:voter" {
		j.t.Fatalf("members: %s", got)
	}
	if a, b := j.clusterIDOf("cp1"), j.clusterIDOf("cp2"); a != b {
		j.t.Fatalf("two clusters: cp1 in %x, cp2 in %x", a, b)
	}
	if ok, err := joinNodeOn(j.c.Host("cp2")).JoinIntentSurvives(j.ctx); ok || err != nil {
		j.t.Fatalf("journal survives a finished join (%v)", err)
	}
	cs := configMapClient(j.t, j.c.Host("cp2"))
	got, err := cs.CoreV1().ConfigMaps("default").Get(j.ctx, "sentinel", metav1.GetOptions{})
	if err != nil || got.Data["written"] != "before" {
		j.t.Fatalf("data written before the join, read through cp2: %v %v", got, err)
	}
}

func (j *joinCluster) writeSentinel() {
	j.t.Helper()
	cs := configMapClient(j.t, j.c.Host("cp1"))
	if _, err := cs.CoreV1().ConfigMaps("default").Create(j.ctx, configMap("sentinel", map[string]string{"written": "before"}), metav1.CreateOptions{}); err != nil {
		j.t.Fatal(err)
	}
}

// TestJoinCrashAtEveryCheckpointConverges crashes cp2's join at each
// checkpoint, then does what an operator would: reboot (`stratum up`), and
// when that does not finish the join, re-run the join command. The node ends
// joined; never an orphan member, never a second cluster.
func TestJoinCrashAtEveryCheckpointConverges(t *testing.T) {
	t.Parallel() // its own simulated cluster
	for _, cp := range ha.JoinCheckpoints {
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			j := startJoinCluster(t, 1)
			j.writeSentinel()
			o := j.mint(time.Hour)
			h := j.c.Host("cp2")
			inc := h.Incarnation()
			j.c.CrashAt("cp2", cp)
			returned := make(chan error, 1)
			go func() {
				_, err := joinNodeOn(h).PrepareControlPlaneJoin(j.ctx, o)
				returned <- err
			}()
			deadline := time.Now().Add(2 * time.Minute)
			for h.Incarnation() == inc {
				select {
				case err := <-returned:
					t.Fatalf("the join returned (%v) without reaching %s", err, cp)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("the join never reached %s", cp)
				}
				time.Sleep(20 * time.Millisecond)
			}
			select {
			case err := <-returned:
				t.Fatalf("a join crashed at %s returned: %v", cp, err)
			case <-time.After(200 * time.Millisecond):
			}
			j.checkSafe()

			// Reboot: `stratum up`, as the operator runs it (Up: on a node
			// with no state it would bootstrap a cluster of its own).
			n := joinNodeOn(h)
			_, stateErr := h.Files().ReadFile(nodestate.Path)
			_, intentErr := h.Files().ReadFile(ha.JoinIntentPath())
			_, kcErr := h.Files().ReadFile(version.Kubeconfig("bootstrap"))
			var upErr error
			if stateErr == nil || intentErr == nil || kcErr == nil {
				_, upErr = n.Up(j.ctx, ha.BootstrapOptions{})
			} else {
				// Nothing of the join on disk (a crash at its start): a
				// bootstrap there would be a new cluster's, not this test's.
				_, upErr = n.StartControlPlane(j.ctx)
			}
			switch {
			case stateErr == nil:
				if upErr != nil {
					t.Fatalf("stratum up on a node with saved state: %v", upErr)
				}
			case intentErr == nil:
				if !errors.Is(upErr, ha.ErrIntentSurvives) {
					t.Fatalf("stratum up over a surviving intent = %v, want ErrIntentSurvives", upErr)
				}
			case kcErr == nil:
				// The join's discovery is done, its downloads maybe: a
				// bootstrap would start a second cluster under the real
				// one's CAs. It once did.
				if !ha.IsRefusal(upErr) || !strings.Contains(upErr.Error(), version.Kubeconfig("bootstrap")) {
					t.Fatalf("stratum up on a node a join left without state = %v, want a refusal naming %s", upErr, version.Kubeconfig("bootstrap"))
				}
				if _, err := h.Files().ReadFile(nodestate.Path); err == nil {
					t.Fatal("stratum up on a node a join left without state saved a node state")
				}
				if h.EtcdRunning() {
					t.Fatal("stratum up on a node a join left without state started etcd")
				}
			default:
				if upErr == nil {
					t.Fatal("stratum up on a node with neither state nor intent started something")
				}
			}
			j.checkSafe()
			if stateErr != nil {
				// Re-run the join command.
				if _, err := n.PrepareControlPlaneJoin(j.ctx, o); err != nil {
					t.Fatalf("re-run after a crash at %s: %v", cp, err)
				}
				if _, err := n.StartControlPlane(j.ctx); err != nil {
					t.Fatalf("stratum up after the re-run: %v", err)
				}
			}
			j.checkJoined()
		})
	}
}

// TestJoinSignalAtEveryStepBoundary sends SIGINT while the join is paused at
// each checkpoint. Before the member-add the join stops there, adding
// nothing and leaving nothing; from the member-add to the saved state the
// signal is deferred and the join finishes saving its state; the signal then
// ends the run, and `stratum up` completes the node.
func TestJoinSignalAtEveryStepBoundary(t *testing.T) {
	t.Parallel() // its own simulated cluster
	deferred := map[string]bool{ha.CheckpointAfterMemberAdd: true, ha.CheckpointBeforeStateSave: true, ha.CheckpointAfterStateSave: true}
	for _, cp := range ha.JoinCheckpoints {
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			j := startJoinCluster(t, 1)
			j.writeSentinel()
			o := j.mint(time.Hour)
			h := j.c.Host("cp2")
			sigs := make(chan os.Signal, 1)
			run := interrupt.NewWithSignals(j.ctx, sigs, nil)
			defer run.Stop()
			paused := j.c.PauseAt("cp2", cp)
			type result struct {
				st  *nodestate.NodeState
				err error
			}
			done := make(chan result, 1)
			go func() {
				st, err := joinNodeOn(h).PrepareControlPlaneJoin(run.Context(), o)
				done <- result{st, err}
			}()
			select {
			case <-paused.Reached():
			case r := <-done:
				t.Fatalf("join returned before %s: %v", cp, r.err)
			case <-time.After(2 * time.Minute):
				t.Fatalf("join never reached %s", cp)
			}
			sigs <- syscall.SIGINT
			time.Sleep(50 * time.Millisecond)
			paused.Release()
			r := <-done
			if deferred[cp] {
				if r.err != nil {
					t.Fatalf("signal at %s (inside the deferral window) stopped the join: %v", cp, r.err)
				}
				if run.Context().Err() == nil {
					t.Fatalf("the deferred signal was never delivered")
				}
				if _, err := joinNodeOn(h).StartControlPlane(j.ctx); err != nil {
					t.Fatalf("stratum up after the interrupted run: %v", err)
				}
				j.checkJoined()
				return
			}
			if r.err == nil {
				t.Fatalf("signal at %s did not stop the join", cp)
			}
			if got := strings.Join(j.members(), " "); got != "cp1:voter" {
				t.Fatalf("a join interrupted at %s changed membership: %s", cp, got)
			}
			if ok, _ := joinNodeOn(h).JoinIntentSurvives(j.ctx); ok {
				t.Fatalf("a join interrupted at %s before its member-add left its journal", cp)
			}
			for p := range snapshotFiles(t, h.Root()) {
				t.Fatalf("a join interrupted at %s left %s", cp, p)
			}
		})
	}
}

// TestJoinFailureAfterMemberAddRollsBack fails the join right after its
// member-add and right before its state save: the join removes exactly the
// member it added, through the published endpoints, clears its journal and
// the files it created, and the same command then joins.
func TestJoinFailureAfterMemberAddRollsBack(t *testing.T) {
	t.Parallel() // its own simulated cluster
	for _, cp := range []string{ha.CheckpointAfterMemberAdd, ha.CheckpointBeforeStateSave} {
		t.Run(cp, func(t *testing.T) {
			t.Parallel() // each on its own cluster
			j := startJoinCluster(t, 1)
			j.writeSentinel()
			o := j.mint(time.Hour)
			h := j.c.Host("cp2")
			boom := errors.New("injected fault")
			j.c.FailAt("cp2", cp, boom)
			_, err := joinNodeOn(h).PrepareControlPlaneJoin(j.ctx, o)
			if !errors.Is(err, boom) {
				t.Fatalf("join failing at %s = %v", cp, err)
			}
			if got := strings.Join(j.members(), " "); got != "cp1:voter" {
				t.Fatalf("after a failure at %s the added member was not rolled back: %s", cp, got)
			}
			if ok, err := joinNodeOn(h).JoinIntentSurvives(j.ctx); ok || err != nil {
				t.Fatalf("journal survives a rolled-back join (%v)", err)
			}
			for p := range snapshotFiles(t, h.Root()) {
				t.Fatalf("a rolled-back join left %s", p)
			}
			if err := j.join("cp2", o); err != nil {
				t.Fatalf("join after the rollback: %v", err)
			}
			j.checkJoined()
		})
	}
}

// TestJoinSignalWhileTheAddIsRefusedStopsIt: etcd refuses the join's
// member-add while another member is still a learner (another join in
// flight), and the join waits to try again with nothing added. A SIGINT
// then stops the join there, as at any step before the add: nothing added,
// no journal, no file left, although the learner that blocked it is gone
// by the time the join would have tried again. The signal was once held
// through the whole wait (the deferral window opened before the first
// attempt), and the join then added its member.
func TestJoinSignalWhileTheAddIsRefusedStopsIt(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 2)
	j.writeSentinel()
	o := j.mint(time.Hour)
	h := j.c.Host("cp2")
	cli, err := j.c.Host("cp1").EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	blocker, err := cli.MemberAddAsLearner(j.ctx, []string{j.c.Host("cp3").PeerURL()})
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	run := interrupt.NewWithSignals(j.ctx, sigs, nil)
	defer run.Stop()
	var progress syncbuf.Buffer
	done := make(chan error, 1)
	go func() {
		_, err := reportingNodeOn(h, &progress).PrepareControlPlaneJoin(run.Context(), o)
		done <- err
	}()
	const waiting = "waiting for etcd to accept the member add of cp2 (another member is still a learner"
	for deadline := time.Now().Add(time.Minute); !strings.Contains(progress.String(), waiting); {
		select {
		case err := <-done:
			t.Fatalf("the join returned (%v) before waiting on the learner; it printed:\n%s", err, progress.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the join never waited on the learner; it printed:\n%s", progress.String())
		}
	}
	sigs <- syscall.SIGINT
	// The learner that blocked the add goes: an attempt made now would land.
	if _, err := cli.MemberRemove(j.ctx, blocker.Member.ID); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if err == nil || !strings.Contains(err.Error(), "nothing was added") {
		t.Fatalf("a join interrupted while etcd refused its add: %v, want it stopped with nothing added", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp1:voter" {
		t.Fatalf("a join interrupted while etcd refused its add changed the membership: %s", got)
	}
	if ok, _ := joinNodeOn(h).JoinIntentSurvives(j.ctx); ok {
		t.Fatal("a join interrupted before its member-add left its journal")
	}
	for p := range snapshotFiles(t, h.Root()) {
		t.Fatalf("a join interrupted before its member-add left %s", p)
	}
	if err := j.join("cp2", o); err != nil {
		t.Fatalf("the same join command after the interrupted one: %v", err)
	}
	j.checkJoined()
}
