package ha_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/nodestate"
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

	// The reboot, the disk not mounted: an empty data directory.
	h.Crash()
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
