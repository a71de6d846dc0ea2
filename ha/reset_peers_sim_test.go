package ha_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestResetOfTheFirstControlPlaneWithItsEtcdStopped: cp1, the cluster's
// first control plane, whose node state's initial cluster names only itself
// (as `stratum up`'s bootstrap records it, and a snapshot restore's seed),
// is reset with its etcd stopped while cp2 and cp3 serve. The reset finds
// them through the members the cluster published for joiners, read through
// the VIP, and removes cp1's member through them. First, with that list
// unreadable (the admin kubeconfig gone), the reset is refused, nothing
// changed, naming the address it asked and why the list could not be read;
// then, its node state recording another cluster ID, refused again, the
// published members answering for a cluster that is not its own.
func TestResetOfTheFirstControlPlaneWithItsEtcdStopped(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 3, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h1 := c.Host("cp1")
	cp1 := joinNodeOn(h1)
	st, err := nodestate.Load(h1.Files())
	if err != nil {
		t.Fatal(err)
	}
	st.Etcd.InitialCluster = h1.Name() + "=" + h1.PeerURL()
	if err := nodestate.Save(h1.Files(), st); err != nil {
		t.Fatal(err)
	}
	// sim.Start publishes nothing for joiners: a join command's mint
	// creates stratum-certs, and the members are then published on it as
	// every control plane's start and the operator's passes do.
	if _, err := mintOptions(ctx, c, cp1, time.Hour); err != nil {
		t.Fatalf("mint: %v", err)
	}
	if err := cp1.PublishEtcdMembers(ctx); err != nil {
		t.Fatalf("publish the etcd members: %v", err)
	}
	admin, err := h1.Admin()
	if err != nil {
		t.Fatal(err)
	}
	s, err := admin.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		if published := s.Annotations["stratum.dev/etcd-client-urls"]; !strings.Contains(published, c.Host(name).ClientURL()) {
			t.Fatalf("the published members %q do not name %s", published, name)
		}
	}
	h1.StopEtcd()

	kc := version.Kubeconfig(kubeconfig.Admin)
	data, err := h1.Files().ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	if err := h1.Files().Remove(kc); err != nil {
		t.Fatal(err)
	}
	var refused syncbuf.Buffer
	err = cp1.ResetControlPlane(ctx, &refused, false)
	if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "asked "+h1.IP().String()+";") ||
		!strings.Contains(err.Error(), "could not be read") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("the reset with the published members unreadable = %v, want a refusal naming the address asked and why the published members could not be read\n%s", err, refused.String())
	}
	t.Logf("refused: %v", err)
	if ms, err := c.Host("cp2").EtcdMembers(ctx); err != nil || len(ms) != 3 {
		t.Fatalf("members after the refused reset: %v, %v; want all three", ms, err)
	}
	if err := h1.Files().WriteFile(kc, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// A node state recording another cluster (a restore's seed, while the
	// published list is still the old cluster's, which lists this node's
	// peer URL as a member): the published members answer for a cluster
	// that is not this node's, and nothing is removed through them.
	st.Etcd.ClusterID = "5eed"
	if err := nodestate.Save(h1.Files(), st); err != nil {
		t.Fatal(err)
	}
	err = cp1.ResetControlPlane(ctx, &refused, false)
	if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "not this node's 5eed") {
		t.Fatalf("the reset of a node recording another cluster = %v, want a refusal naming the cluster the published members answer for", err)
	}
	if ms, err := c.Host("cp2").EtcdMembers(ctx); err != nil || len(ms) != 3 {
		t.Fatalf("members after the reset refused for the cluster ID: %v, %v; want all three", ms, err)
	}
	st.Etcd.ClusterID = ""
	if err := nodestate.Save(h1.Files(), st); err != nil {
		t.Fatal(err)
	}

	var out syncbuf.Buffer
	if err := cp1.ResetControlPlane(ctx, &out, false); err != nil {
		t.Fatalf("the reset of cp1 with its etcd stopped: %v\n%s", err, out.String())
	}
	ms, err := c.Host("cp2").EtcdMembers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"cp2", "cp3"}) {
		t.Fatalf("members after cp1's reset: %v, want cp2 and cp3", got)
	}
	if err := nodeOn(c.Host("cp2")).EtcdClusterHealthy(ctx, ipsOf(c, "cp2", "cp3")); err != nil {
		t.Fatalf("the cluster after cp1's reset: %v", err)
	}
	checkNoControlPlaneFiles(t, h1)
	t.Logf("reset:\n%s", out.String())
}
