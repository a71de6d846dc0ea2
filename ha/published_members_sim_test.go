package ha_test

import (
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
)

// publishedMembersAnnotation is where the cluster publishes its etcd members
// for joins, as a user reads it with kubectl.
const publishedMembersAnnotation = "stratum.dev/etcd-client-urls"

// TestJoinFindsTheMembersPublishedAfterItsMint: a join command's grant names
// the etcd members at its mint; the cluster publishes its current members
// beside the grant (each control plane's start, a reset, the operator's
// pass), so the command still joins once every member it names is gone, and
// is refused, saying to mint a fresh one with nothing changed, only when no
// member the cluster published answers. The publication is read from
// outside, as kubectl reads the Secret.
func TestJoinFindsTheMembersPublishedAfterItsMint(t *testing.T) {
	t.Parallel() // its own simulated cluster
	j := startJoinCluster(t, 3)
	c := j.c
	cp1, cp2, cp3 := c.Host("cp1"), c.Host("cp2"), c.Host("cp3")
	cfg, err := c.VIPConfig() // cp1's admin kubeconfig, read before cp1 goes
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	published := func() string {
		t.Helper()
		s, err := admin.CoreV1().Secrets("kube-system").Get(j.ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Annotations[publishedMembersAnnotation]
	}
	urls := func(urls ...string) string {
		slices.Sort(urls)
		return strings.Join(urls, ",")
	}

	o := j.mint(time.Hour) // its grant names cp1's etcd only
	if got, want := published(), urls(cp1.ClientURL()); got != want {
		t.Fatalf("published after the mint: %q, want %q", got, want)
	}
	if err := j.join("cp2", o); err != nil {
		t.Fatalf("join cp2: %v", err)
	}
	if got, want := published(), urls(cp1.ClientURL(), cp2.ClientURL()); got != want {
		t.Fatalf("published after cp2's start: %q, want %q", got, want)
	}

	// cp1, the only member the command names, leaves.
	if err := joinNodeOn(cp1).ResetControlPlane(j.ctx, io.Discard, false); err != nil {
		t.Fatalf("reset cp1: %v", err)
	}
	if got, want := published(), urls(cp2.ClientURL()); got != want {
		t.Fatalf("published after cp1's reset: %q, want %q", got, want)
	}
	j.etcdOn = "cp2"
	if err := j.join("cp3", o); err != nil {
		t.Fatalf("join cp3 with the command minted when cp1 alone was a member: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp2:voter cp3:voter" {
		t.Fatalf("members after cp3's join: %s", got)
	}
	if got, want := published(), urls(cp2.ClientURL(), cp3.ClientURL()); got != want {
		t.Fatalf("published after cp3's start: %q, want %q", got, want)
	}

	// A publication nothing refreshed (written here by hand) naming only a
	// member that is gone, as the grant does: refused, nothing changed.
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{publishedMembersAnnotation: cp1.ClientURL()}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets("kube-system").Patch(j.ctx, "stratum-certs", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	j.joinRefused("cp4", o, ha.ErrClusterUnhealthy, "mint a fresh join command")

	// The operator's pass publishes the members again; the command joins.
	if _, err := joinNodeOn(cp2).OperatorPass(j.ctx, admin); err != nil {
		t.Fatalf("operator pass on cp2: %v", err)
	}
	if got, want := published(), urls(cp2.ClientURL(), cp3.ClientURL()); got != want {
		t.Fatalf("published after the operator's pass: %q, want %q", got, want)
	}
	if err := j.join("cp4", o); err != nil {
		t.Fatalf("join cp4 after the operator's pass: %v", err)
	}
	if got := strings.Join(j.members(), " "); got != "cp2:voter cp3:voter cp4:voter" {
		t.Fatalf("members after cp4's join: %s", got)
	}
}
