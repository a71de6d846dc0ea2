package ha_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestSnapshotRestoreRefusesANewerEtcdsData: a snapshot saved before an
// etcd downgrade holds data at the newer etcd's storage version, which the
// downgraded etcd does not start on. Its restore (and the dry run) is
// refused before the control plane is stopped, naming both versions, with
// the node's data, node state and services as they were; a snapshot saved
// since the downgrade restores.
func TestSnapshotRestoreRefusesANewerEtcdsData(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t, assets.EtcdName(version.Etcd), assets.EtcdName(version.EtcdPrevious))
	c := sim.Start(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp1 := c.Host("cp1")
	ip := cp1.IP().String()
	n := joinNodeOn(cp1)
	if st, err := settledStorage(t, ctx, n, ip, "3.7"); err != nil || !strings.HasPrefix(st.StorageVersion, "3.7") {
		t.Fatalf("storage before the downgrade: %+v, %v", st, err)
	}
	dir := t.TempDir()
	older := filepath.Join(dir, "before-downgrade.db")
	if _, err := n.SnapshotSave(ctx, older); err != nil {
		t.Fatal(err)
	}

	// The downgrade, as `stratum etcd downgrade` and the operator's swap
	// run it on a one-member cluster.
	done := make(chan error, 1)
	go func() { done <- n.DowngradeEtcd(ctx, ip, "3.6") }()
	if st, err := settledStorage(t, ctx, n, ip, "3.6"); err != nil || !strings.HasPrefix(st.StorageVersion, "3.6") {
		t.Fatalf("storage not lowered by the downgrade: %+v, %v", st, err)
	}
	cp1.StopEtcd()
	cp1.SetEtcdVersion(version.EtcdPrevious)
	if err := cp1.StartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("DowngradeEtcd: %v", err)
	}
	put(t, ctx, cp1, "after-downgrade")

	// The older snapshot: refused, dry run and restore alike, changing nothing.
	stateBefore, _ := cp1.Files().ReadFile(nodestate.Path)
	var plan syncbuf.Buffer
	if err := n.SnapshotRestorePlan(ctx, &plan, older); !errors.Is(err, ha.ErrSnapshotNewerThanEtcd) || !errors.Is(err, ha.ErrRefused) {
		t.Fatalf("restore dry run of a snapshot saved before the downgrade: %v, want ErrSnapshotNewerThanEtcd\n%s", err, plan.String())
	}
	var out syncbuf.Buffer
	err := reportingNodeOn(cp1, &out).SnapshotRestore(ctx, &out, older)
	if !errors.Is(err, ha.ErrSnapshotNewerThanEtcd) || !errors.Is(err, ha.ErrRefused) {
		t.Fatalf("restore of a snapshot saved before the downgrade: %v, want a refusal (ErrSnapshotNewerThanEtcd)\n%s", err, out.String())
	}
	for _, want := range []string{"storage version 3.7", strings.TrimPrefix(version.EtcdPrevious, "v"), "nothing was changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q: %v", want, err)
		}
	}
	if strings.Contains(out.String(), "stop the control plane") {
		t.Errorf("the refused restore stopped the control plane:\n%s", out.String())
	}
	stateAfter, _ := cp1.Files().ReadFile(nodestate.Path)
	if !bytes.Equal(stateBefore, stateAfter) || !cp1.EtcdRunning() || !cp1.APIServerRunning() {
		t.Fatalf("the refused restore changed cp1: node state changed %v, etcd running %v, apiserver running %v", !bytes.Equal(stateBefore, stateAfter), cp1.EtcdRunning(), cp1.APIServerRunning())
	}
	if !has(t, ctx, cp1, "after-downgrade") {
		t.Fatal("the refused restore lost a key written after the snapshot")
	}

	// A snapshot saved since the downgrade restores on the same node.
	newer := filepath.Join(dir, "after-downgrade.db")
	if _, err := n.SnapshotSave(ctx, newer); err != nil {
		t.Fatal(err)
	}
	put(t, ctx, cp1, "after-second-snapshot")
	out = syncbuf.Buffer{}
	if err := reportingNodeOn(cp1, &out).SnapshotRestore(ctx, &out, newer); err != nil {
		t.Fatalf("restore of a snapshot saved since the downgrade: %v\n%s", err, out.String())
	}
	if !has(t, ctx, cp1, "after-downgrade") || has(t, ctx, cp1, "after-second-snapshot") {
		t.Fatal("the restored cluster does not hold exactly the second snapshot's keys")
	}
	if m := n.EtcdMemberStatus(ctx, ip); m.Err != nil || !strings.HasPrefix(m.Version, "3.6") {
		t.Fatalf("the restored member: %+v", m)
	}
}

// put writes key through h's own etcd member.
func put(t *testing.T, ctx context.Context, h *sim.Host, key string) {
	t.Helper()
	cli, err := h.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, key, "x"); err != nil {
		t.Fatalf("put %s through %s: %v", key, h.Name(), err)
	}
}

// has reads key through h's own etcd member.
func has(t *testing.T, ctx context.Context, h *sim.Host, key string) bool {
	t.Helper()
	cli, err := h.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatalf("get %s through %s: %v", key, h.Name(), err)
	}
	return len(resp.Kvs) > 0
}
