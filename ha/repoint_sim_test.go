package ha_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"path"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/nodelock"
	"stratum.dev/stratum/internal/nodestate"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// confFiles is every *.conf under the host's kubeconfig directory, by name.
func confFiles(t *testing.T, h *sim.Host) map[string][]byte {
	t.Helper()
	out, err := h.Kubeconfigs()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pointAt rewrites the host's kubeconfigs and node state to server, as a
// single controller that has not grown into HA has them.
func pointAt(t *testing.T, h *sim.Host, server string) {
	t.Helper()
	for name, b := range confFiles(t, h) {
		out, err := kubeconfig.Repoint(b, server)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Files().WriteFile(path.Join(version.K8sConfDir, name), out, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	st, err := nodestate.Load(h.Files())
	if err != nil {
		t.Fatal(err)
	}
	st.Server = server
	if err := nodestate.Save(h.Files(), st); err != nil {
		t.Fatal(err)
	}
}

// unusedAddr is an address in c's loopback /24 that nothing listens on.
func unusedAddr(c *sim.Cluster) string {
	b := c.VIPAddress().As4()
	b[3] = 250
	return netip.AddrFrom4(b).String()
}

// failingRestart is a host whose service restarts fail.
type failingRestart struct{ *sim.Handle }

func (failingRestart) RestartService(_ context.Context, name string) error {
	return errors.New("restart of " + name + " refused by the test")
}

func TestNodeRepoint(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 2, SpareHosts: 1, APIServers: true, VIP: true})
	other := sim.Start(t, sim.Config{ControlPlanes: 1, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp1 := c.Host("cp1")
	pointAt(t, cp1, cp1.APIServerURL())
	before := confFiles(t, cp1)
	if len(before) < 2 {
		t.Fatalf("kubeconfigs on cp1: %v", before)
	}
	stateBefore, _ := cp1.Files().ReadFile(nodestate.Path)
	n := joinNodeOn(cp1)
	vip := c.VIPAddress().String()

	if ok, err := n.VIPServes(ctx, vip); !ok || err != nil {
		t.Fatalf("VIPServes(own VIP) = %v, %v", ok, err)
	}
	// A VIP that serves another cluster's apiserver, and one where nothing
	// answers: refused, nothing changed.
	for _, bad := range []string{other.VIPAddress().String(), unusedAddr(c)} {
		var out bytes.Buffer
		if _, err := n.NodeRepoint(ctx, &out, bad); !errors.Is(err, ha.ErrVIPNotServing) {
			t.Fatalf("NodeRepoint(%s): %v", bad, err)
		}
		unchangedBy(t, "NodeRepoint("+bad+")", cp1, before, stateBefore)
	}
	// A control plane's own address, this node's or another member's,
	// would pass the serving check (its certificate covers its own IP):
	// refused before anything changes, kube-vip never told to announce it.
	for _, addr := range []string{cp1.IP().String(), c.Host("cp2").IP().String()} {
		_, err := n.NodeRepoint(ctx, &bytes.Buffer{}, addr)
		if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "the VIP "+addr+" is ") || !strings.Contains(err.Error(), "nothing was changed") {
			t.Fatalf("NodeRepoint(%s), a control plane's address: %v", addr, err)
		}
		if err := n.RepointPlan(ctx, &bytes.Buffer{}, nil, addr, false); !ha.IsRefusal(err) {
			t.Fatalf("RepointPlan(%s), a control plane's address: %v", addr, err)
		}
		unchangedBy(t, "NodeRepoint("+addr+")", cp1, before, stateBefore)
	}
	// A kubeconfig that cannot be repointed (a stray file that is not one)
	// is found before the node state records the VIP: refused, nothing
	// changed.
	stray := path.Join(version.K8sConfDir, "stray.conf")
	if err := cp1.Files().WriteFile(stray, []byte("not a kubeconfig: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := n.NodeRepoint(ctx, &bytes.Buffer{}, vip); !ha.IsRefusal(err) || !strings.Contains(err.Error(), "stray.conf") {
		t.Fatalf("NodeRepoint with a stray kubeconfig: %v", err)
	}
	if s, _ := cp1.Files().ReadFile(nodestate.Path); !bytes.Equal(s, stateBefore) {
		t.Fatal("NodeRepoint refused for a stray kubeconfig, but changed the node state")
	}
	if err := cp1.Files().Remove(stray); err != nil {
		t.Fatal(err)
	}
	// A stand-in check that says no is obeyed too.
	if _, err := n.NodeRepointServes(ctx, &bytes.Buffer{}, vip, func(context.Context, string) (bool, error) { return false, nil }); !errors.Is(err, ha.ErrVIPNotServing) {
		t.Fatalf("NodeRepoint with a VIP that does not answer: %v", err)
	}

	// Another operation on this node (a start, a renewal) holds its
	// maintenance lock: refused, naming the holder, nothing changed. A
	// start's strip of the join token and a repoint's rewrite of
	// bootstrap.conf never race.
	release, err := nodelock.Acquire(cp1.Handle(), nodelock.Maintenance, "stratum up (the test's)")
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.NodeRepoint(ctx, &bytes.Buffer{}, vip)
	if !errors.Is(err, nodelock.ErrBusy) || !ha.IsRefusal(err) || !strings.Contains(err.Error(), "stratum up (the test's)") || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("NodeRepoint while a start holds the node's maintenance lock: %v", err)
	}
	unchangedBy(t, "NodeRepoint under another's maintenance lock", cp1, before, stateBefore)
	if err := release(); err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	warnings, err := n.NodeRepoint(ctx, &out, vip)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("NodeRepoint(%s) = %v, %v\n%s", vip, warnings, err, out.String())
	}
	if !strings.Contains(out.String(), "restarted kube-vip") {
		t.Fatalf("kube-vip not restarted:\n%s", out.String())
	}
	checkRepointed(t, cp1, before, c.VIPURL())

	// `stratum up` on the repointed node keeps the VIP. Like every start
	// it trusts the pod range in the firewall again (a reboot drops the
	// rule the assembly made).
	cp1.Crash()
	trusted := len(c.Events().Find("action", "firewall trusts "+c.Config().PodCIDR))
	st, err := joinNodeOn(cp1).StartControlPlane(ctx)
	if err != nil {
		t.Fatalf("stratum up after the repoint: %v", err)
	}
	if got := len(c.Events().Find("action", "firewall trusts "+c.Config().PodCIDR)); got != trusted+1 {
		t.Fatalf("stratum up trusted the pod range %s %d times, want once", c.Config().PodCIDR, got-trusted)
	}
	if st.Server != c.VIPURL() {
		t.Fatalf("node state server after up: %s, want %s", st.Server, c.VIPURL())
	}
	checkRepointed(t, cp1, before, c.VIPURL())

	// A consumer that does not restart is a warning beside a nil error.
	pointAt(t, cp1, cp1.APIServerURL())
	fn := ha.NewNode(ha.Env{Host: failingRestart{cp1.Handle()}})
	warnings, err = fn.NodeRepoint(ctx, &bytes.Buffer{}, vip)
	if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "kube-vip") {
		t.Fatalf("NodeRepoint with a failing restart = %q, %v", warnings, err)
	}
	checkRepointed(t, cp1, before, c.VIPURL())

	// A control plane whose etcd no member answers for (every member
	// stopped, as when no supervisor runs) still checks the VIP against the
	// addresses its state knows: cp2's etcd started with cp1, so cp1's
	// address is refused; an address its state does not know passes that
	// check with a warning (the member list could not be read) and meets
	// the serving check.
	cp2 := c.Host("cp2")
	cp1.StopEtcd()
	cp2.StopEtcd()
	before2 := confFiles(t, cp2)
	state2, _ := cp2.Files().ReadFile(nodestate.Path)
	var logs bytes.Buffer
	n2 := ha.NewNode(ha.Env{Host: cp2.Handle(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	_, err = n2.NodeRepoint(ctx, &bytes.Buffer{}, cp1.IP().String())
	if !ha.IsRefusal(err) || !strings.Contains(err.Error(), "a control plane this node's etcd started with") {
		t.Fatalf("NodeRepoint(cp1's address) on cp2 with etcd down: %v", err)
	}
	unchangedBy(t, "NodeRepoint(cp1's address) on cp2", cp2, before2, state2)
	if logs.Len() != 0 {
		t.Fatalf("a refusal by the node state's addresses read the member list:\n%s", logs.String())
	}
	unused := unusedAddr(c)
	if _, err := n2.NodeRepoint(ctx, &bytes.Buffer{}, unused); !errors.Is(err, ha.ErrVIPNotServing) {
		t.Fatalf("NodeRepoint(%s) on cp2 with etcd down: %v", unused, err)
	}
	if !strings.Contains(logs.String(), "the etcd member list could not be read") {
		t.Fatalf("no warning that the member list was not read:\n%s", logs.String())
	}
	unchangedBy(t, "NodeRepoint("+unused+") on cp2", cp2, before2, state2)
}

// unchangedBy fails t unless h's kubeconfigs are before and its node state
// is state: what a refused repoint (what) must leave.
func unchangedBy(t *testing.T, what string, h *sim.Host, before map[string][]byte, state []byte) {
	t.Helper()
	for name, b := range confFiles(t, h) {
		if !bytes.Equal(b, before[name]) {
			t.Fatalf("%s refused, but changed %s", what, name)
		}
	}
	if s, _ := h.Files().ReadFile(nodestate.Path); !bytes.Equal(s, state) {
		t.Fatalf("%s refused, but changed the node state", what)
	}
}

// checkRepointed: every kubeconfig before names server now, with its
// credentials and CA unchanged, and the node state records server.
func checkRepointed(t *testing.T, h *sim.Host, before map[string][]byte, server string) {
	t.Helper()
	after := confFiles(t, h)
	for name, b := range before {
		a, ok := after[name]
		if !ok {
			t.Fatalf("%s gone after the repoint", name)
		}
		if got, err := kubeconfig.Server(a); err != nil || got != server {
			t.Fatalf("%s server %q (%v), want %s", name, got, err, server)
		}
		ra, err := kubeconfig.RESTConfig(a)
		if err != nil {
			t.Fatal(err)
		}
		rb, err := kubeconfig.RESTConfig(b)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ra.CertData, rb.CertData) || !bytes.Equal(ra.KeyData, rb.KeyData) || !bytes.Equal(ra.CAData, rb.CAData) || ra.BearerToken != rb.BearerToken {
			t.Fatalf("%s: credentials changed by the repoint", name)
		}
	}
	st, err := nodestate.Load(h.Files())
	if err != nil || st.Server != server {
		t.Fatalf("node state server %v (%v), want %s", st, err, server)
	}
	// The repointed admin kubeconfig reaches the cluster through the VIP.
	cfg, err := kubeconfig.RESTConfig(after["admin.conf"])
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(context.Background(), "kube-system", metav1.GetOptions{}); err != nil {
		t.Fatalf("admin kubeconfig through %s: %v", server, err)
	}
}

func TestRepointKubeconfigsState(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, SpareHosts: 1})
	spare := c.Host("cp2")
	cp1 := c.Host("cp1")
	// A node with kubeconfigs (bootstrap.conf among them) and no state:
	// rewritten, nothing to record.
	for name, b := range confFiles(t, cp1) {
		if err := spare.Files().WriteFile(path.Join(version.K8sConfDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	boot, err := kubeconfig.ForToken(cp1.APIServerURL(), []byte("ca"), "abcdef.0123456789abcdef", "tls-bootstrap-token-user")
	if err != nil {
		t.Fatal(err)
	}
	if err := spare.Files().WriteFile(version.Kubeconfig("bootstrap"), boot, 0o600); err != nil {
		t.Fatal(err)
	}
	before := confFiles(t, spare)
	n := joinNodeOn(spare)
	server := "https://" + c.VIPAddress().String() + ":6443"
	if err := n.RepointKubeconfigs(server); err != nil {
		t.Fatalf("repoint with no node state: %v", err)
	}
	for name := range before {
		if got, err := kubeconfig.Server(confFiles(t, spare)[name]); err != nil || got != server {
			t.Fatalf("%s: server %q (%v)", name, got, err)
		}
	}
	if tok, err := kubeconfig.TokenOf(confFiles(t, spare)["bootstrap.conf"]); err != nil || tok != "abcdef.0123456789abcdef" {
		t.Fatalf("bootstrap token after the repoint: %q (%v)", tok, err)
	}
	if _, err := spare.Files().ReadFile(nodestate.Path); err == nil {
		t.Fatal("a repoint with no node state wrote one")
	}

	// An unreadable node state is an error, and nothing is rewritten.
	if err := spare.Files().WriteFile(nodestate.Path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	before = confFiles(t, spare)
	if err := n.RepointKubeconfigs("https://10.0.0.1:6443"); err == nil {
		t.Fatal("repoint with a malformed node state succeeded")
	}
	for name, b := range confFiles(t, spare) {
		if !bytes.Equal(b, before[name]) {
			t.Fatalf("a refused repoint changed %s", name)
		}
	}
	if err := n.RepointKubeconfigs("http://10.0.0.1"); err == nil {
		t.Fatal("repoint to a non-https server succeeded")
	}
}

// envOf is name=value of every KUBERNETES_SERVICE_* variable of every
// container and init container.
func envOf(spec corev1.PodSpec) []string {
	var out []string
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_") {
					out = append(out, c.Name+":"+e.Name+"="+e.Value)
				}
			}
		}
	}
	return out
}

func TestRepointCilium(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{ControlPlanes: 1, APIServers: true, VIP: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cp1 := c.Host("cp1")
	admin, err := cp1.Admin()
	if err != nil {
		t.Fatal(err)
	}
	ds, dep := sim.CiliumObjects()
	if ds, err = admin.AppsV1().DaemonSets("kube-system").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if dep, err = admin.AppsV1().Deployments("kube-system").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := joinNodeOn(cp1)
	vip := c.VIPAddress().String()

	unchanged := func(what string) {
		t.Helper()
		gds, err := admin.AppsV1().DaemonSets("kube-system").Get(ctx, "cilium", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gdep, err := admin.AppsV1().Deployments("kube-system").Get(ctx, "cilium-operator", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if gds.ResourceVersion != ds.ResourceVersion || gdep.ResourceVersion != dep.ResourceVersion {
			t.Fatalf("%s changed the Cilium objects: %v %v", what, envOf(gds.Spec.Template.Spec), envOf(gdep.Spec.Template.Spec))
		}
	}

	// A VIP where nothing answers: refused, nothing changed.
	if _, err := n.RepointCiliumWithin(ctx, &bytes.Buffer{}, admin, unusedAddr(c), time.Second); !errors.Is(err, ha.ErrVIPNotServing) {
		t.Fatalf("repoint Cilium at a dead VIP: %v", err)
	}
	unchanged("a refused repoint (dead VIP)")

	// A client that may update the agent DaemonSet but only read the
	// operator Deployment: Forbidden, and nothing changed, the DaemonSet
	// included (both updates are dry-run before either is made).
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium-reader"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"get", "list", "watch", "update"}},
			{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get", "list", "watch"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cilium-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: "cilium-reader"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cp1.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Impersonate.UserName = "cilium-reader"
	reader, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.RepointCiliumWithin(ctx, &bytes.Buffer{}, reader, vip, time.Second); !apierrors.IsForbidden(err) {
		t.Fatalf("repoint Cilium without RBAC to update: %v", err)
	}
	unchanged("a Forbidden repoint")

	// Admin: both patched; no kubelet runs, so neither rollout finishes:
	// warnings naming what each last reported, and a nil error.
	var out bytes.Buffer
	start := time.Now()
	warnings, err := n.RepointCiliumWithin(ctx, &out, admin, vip, 2*time.Second)
	if err != nil {
		t.Fatalf("repoint Cilium: %v\n%s", err, out.String())
	}
	t.Logf("repoint with an unfinished rollout took %s", time.Since(start).Round(time.Millisecond))
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "daemonset kube-system/cilium: 0 of 0 updated, 0 available") ||
		!strings.HasPrefix(warnings[1], "deployment kube-system/cilium-operator: 0 of 1 updated, 0 available") {
		t.Fatalf("warnings: %q", warnings)
	}
	gds, err := admin.AppsV1().DaemonSets("kube-system").Get(ctx, "cilium", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gdep, err := admin.AppsV1().Deployments("kube-system").Get(ctx, "cilium-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantDS := "config:KUBERNETES_SERVICE_HOST=" + vip + " config:KUBERNETES_SERVICE_PORT=6443 cilium-agent:KUBERNETES_SERVICE_HOST=" + vip + " cilium-agent:KUBERNETES_SERVICE_PORT=6443"
	if got := strings.Join(envOf(gds.Spec.Template.Spec), " "); got != wantDS {
		t.Fatalf("daemonset env: %s\nwant %s", got, wantDS)
	}
	if got, want := strings.Join(envOf(gdep.Spec.Template.Spec), " "), "cilium-operator:KUBERNETES_SERVICE_HOST="+vip+" cilium-operator:KUBERNETES_SERVICE_PORT=6443"; got != want {
		t.Fatalf("deployment env: %s\nwant %s", got, want)
	}
	if e := gds.Spec.Template.Spec.Containers[0].Env; len(e) != 3 || e[1].Name != "K8S_NODE_NAME" {
		t.Fatalf("other env of the agent not kept: %v", e)
	}
}
