package ha_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestUpRefusesAMemberWhoseDataIsNotThere: the only control plane's etcd
// data is on a disk of its own, which is not mounted at a reboot (an empty
// data directory). `stratum up` would have started etcd there as the first
// start of a new cluster, same IDs, and the apiserver on an empty store; it
// refuses, starting nothing, and once the disk is back it starts the cluster
// with its data, as kubectl's client reads it.
func TestUpRefusesAMemberWhoseDataIsNotThere(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := c.Hosts()[0]
	if _, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up: %v", err)
	}
	if st, err := nodestate.Load(h.Files()); err != nil || !st.Etcd.Started {
		t.Fatalf("node state after the first start: %+v, %v; want etcd recorded as started", st, err)
	}
	if _, err := configMapClient(t, h).CoreV1().ConfigMaps("default").Create(ctx, configMap("before-reboot", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A reboot that came up at another address: refused, naming the
	// recorded one, etcd not started (it would fail to bind, and the
	// supervisor exit 1 on every try).
	h.Crash()
	moved := ha.NewNode(ha.Env{Host: movedHost{h.Handle(), netip.MustParseAddr("127.0.0.254")}})
	if _, err := moved.Up(ctx, ha.BootstrapOptions{}); !ha.IsRefusal(err) || !strings.Contains(err.Error(), "node IP "+h.IP().String()) || !strings.Contains(err.Error(), "stratum reset") {
		t.Fatalf("stratum up at another address: %v; want a refusal naming the node IP and the way out", err)
	}
	if h.EtcdRunning() {
		t.Fatal("etcd runs after the start refused for the node IP")
	}

	// The reboot, the disk not mounted: an empty data directory.
	data := h.Path(version.EtcdDataDir)
	disk := filepath.Join(t.TempDir(), "disk")
	if err := os.Rename(data, disk); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{})
	if !errors.Is(err, ha.ErrEtcdDataMissing) || !ha.IsRefusal(err) || !strings.Contains(err.Error(), "not mounted?") {
		t.Fatalf("stratum up with the data directory empty: %v; want a refusal naming the missing data", err)
	}
	if h.EtcdRunning() {
		t.Fatal("etcd runs after the refused start: it started on an empty data directory")
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
		t.Fatalf("the empty data directory after the refusal holds %v (%v)", entries, err)
	}

	// The disk is back.
	if err := os.Remove(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(disk, data); err != nil {
		t.Fatal(err)
	}
	if _, err := joinNodeOn(h).Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up with the data back: %v", err)
	}
	if _, err := configMapClient(t, h).CoreV1().ConfigMaps("default").Get(ctx, "before-reboot", metav1.GetOptions{}); err != nil {
		t.Fatalf("the ConfigMap written before the reboot, after it: %v", err)
	}
}

// TestRejoinBringsBackAJoinedMemberWhoseDataIsLost: a joined control plane
// (cp2 of three) loses its etcd data (its disk replaced, or not mounted and
// given up on). `stratum up` refuses, advising `stratum etcd rejoin`; that
// rejoin removes cp2's old member through the seed, adds it again, and
// starts it on empty data, after which cp2 is a voter and starts again. The
// rejoin planned only a start for a member the seed still lists and the
// state records as joined, which the missing data refused again, forever.
func TestRejoinBringsBackAJoinedMemberWhoseDataIsLost(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp2 := c.Host("cp2")
	// A start through stratum records that the member has served.
	if _, err := joinNodeOn(cp2).StartControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	// The others run with a 64 MiB quota, which the rejoined member takes
	// (its own node state records etcd's default).
	const quota = 64 << 20
	for _, name := range []string{"cp1", "cp3"} {
		if _, _, err := joinNodeOn(c.Host(name)).SetEtcdQuota(ctx, quota); err != nil {
			t.Fatalf("etcd quota on %s: %v", name, err)
		}
	}
	cp2.Crash()
	data := cp2.Path(version.EtcdDataDir)
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := joinNodeOn(cp2).StartControlPlane(ctx)
	if !errors.Is(err, ha.ErrEtcdDataMissing) || !strings.Contains(err.Error(), "stratum etcd rejoin --server") {
		t.Fatalf("stratum up on cp2 with its data lost: %v; want ErrEtcdDataMissing advising a rejoin", err)
	}
	// Stopped (Ctrl-C) at its start, before its first step: refused with
	// nothing changed, and the etcd data replacement journal it wrote
	// gone, which would otherwise keep `stratum up` from starting cp2
	// once its data is back by other means.
	stopped, stop := context.WithCancel(ctx)
	d := cp2.Handle()
	stopAtStart := ha.NewNode(ha.Env{Host: d, Checkpoint: func(ctx context.Context, name string) error {
		if name == ha.CheckpointRejoinStart {
			stop()
		}
		return d.Checkpoint(ctx, name)
	}})
	if err := stopAtStart.RejoinEtcd(stopped, io.Discard, c.Host("cp1").IP().String(), false); !ha.IsRefusal(err) || !strings.Contains(err.Error(), "etcd rejoin stopped before member-remove") {
		t.Fatalf("the rejoin stopped at its start: %v, want a refusal saying it stopped before its first step", err)
	}
	if _, err := cp2.Files().Stat(ha.DataReplacePath()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the rejoin stopped before its first step left its data replacement journal (stat: %v)", err)
	}
	var out syncbuf.Buffer
	if err := reportingNodeOn(cp2, &out).RejoinEtcd(ctx, &out, c.Host("cp1").IP().String(), false); err != nil {
		t.Fatalf("the rejoin the refusal advises: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "member-remove, member-add, state-save, start") {
		t.Errorf("the rejoin's plan:\n%s\nwant member-remove, member-add, state-save, start", out.String())
	}
	ms, err := c.Host("cp1").EtcdMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, fmt.Sprintf("%s learner=%t", m.Name, m.IsLearner))
	}
	slices.Sort(got)
	if want := []string{"cp1 learner=false", "cp2 learner=false", "cp3 learner=false"}; !slices.Equal(got, want) {
		t.Fatalf("members after the rejoin: %v, want %v", got, want)
	}
	if m := observerOn(c.Host("cp1")).EtcdMemberStatus(ctx, cp2.IP().String()); m.Err != nil || m.DBQuota != quota {
		t.Fatalf("the rejoined member's quota: %d bytes (%v); want the seed's, %d", m.DBQuota, m.Err, quota)
	}
	cp2.Crash()
	if _, err := joinNodeOn(cp2).StartControlPlane(ctx); err != nil {
		t.Fatalf("stratum up on cp2 after the rejoin: %v", err)
	}
}

// movedHost is a simulated host whose only address is addr: a machine that
// came up at another address than its node state records.
type movedHost struct {
	*sim.Handle
	addr netip.Addr
}

func (m movedHost) Addresses() ([]netip.Addr, error) { return []netip.Addr{m.addr}, nil }
