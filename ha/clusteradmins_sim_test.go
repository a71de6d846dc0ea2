package ha_test

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/assets/assetstest"
	"stratum.dev/stratum/internal/clusteradmins"
	"stratum.dev/stratum/internal/kubeconfig"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/syncbuf"
	"stratum.dev/stratum/internal/version"
	"stratum.dev/stratum/sim"
)

// TestAdminCredentialIsBoundNotSuperuser: the admin kubeconfig a control
// plane writes is authorized by RBAC through the stratum:cluster-admins
// binding, not by system:masters, which the apiserver admits before any
// authorizer and no binding can revoke (kubeadm moved its admin.conf the
// same way in 1.29). Seen as a user sees it, with the admin.conf on disk:
//   - `kubectl auth whoami` names the group, not system:masters, and no
//     certificate or kubeconfig stratum wrote is in system:masters;
//   - the binding taken away, the admin credential is refused (RBAC
//     decides), and the next `stratum up` binds it again;
//   - a binding changed to another role, or stripped of the group, is mended
//     by the next `stratum up`, a subject someone added kept;
//   - a control plane brought up before the binding existed (admin.conf in
//     system:masters, no binding) is moved over by `stratum certs renew`.
func TestAdminCredentialIsBoundNotSuperuser(t *testing.T) {
	t.Parallel() // its own simulated cluster
	assetstest.Require(t)
	c := sim.Start(t, sim.Config{Fresh: true, SpareHosts: 1, APIServers: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h := c.Hosts()[0]
	n := joinNodeOn(h)
	if _, err := n.Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up: %v", err)
	}
	noMastersOnDisk(t, h)
	admin := adminOnDisk(t, h)
	who, err := admin.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if groups := who.Status.UserInfo.Groups; !slices.Contains(groups, pki.ClusterAdminsGroup) || slices.Contains(groups, pki.MastersGroup) {
		t.Fatalf("kubectl auth whoami with admin.conf: groups %v, want %s and not %s", groups, pki.ClusterAdminsGroup, pki.MastersGroup)
	}
	adminCanWrite(t, ctx, admin, "after the bring-up")

	root := superuserOn(t, h)
	crbs := root.RbacV1().ClusterRoleBindings()
	upAgain := func(why string) {
		t.Helper()
		if _, err := n.Up(ctx, ha.BootstrapOptions{}); err != nil {
			t.Fatalf("stratum up %s: %v", why, err)
		}
	}

	if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, clusteradmins.BindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	adminRefused(t, ctx, admin, "with the binding deleted")
	upAgain("after the binding was deleted")
	adminCanWrite(t, ctx, admin, "after stratum up bound it again")

	// Replaced by one naming the view role (roleRef is immutable).
	if err := crbs.Delete(ctx, clusteradmins.BindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	viewOnly := clusteradmins.Binding()
	viewOnly.RoleRef.Name = "view"
	if _, err := crbs.Create(ctx, viewOnly, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	adminRefused(t, ctx, admin, "with the binding naming the view role")
	upAgain("after the binding was changed to the view role")
	adminCanWrite(t, ctx, admin, "after stratum up mended the role")

	// Stripped of the group, a user someone added in its place.
	got, err := crbs.Get(ctx, clusteradmins.BindingName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	someone := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "someone"}
	got.Subjects = []rbacv1.Subject{someone}
	if _, err := crbs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	adminRefused(t, ctx, admin, "with the group taken out of the binding")
	upAgain("after the group was taken out of the binding")
	adminCanWrite(t, ctx, admin, "after stratum up put the group back")
	if got, err = crbs.Get(ctx, clusteradmins.BindingName, metav1.GetOptions{}); err != nil || !slices.Contains(got.Subjects, someone) {
		t.Fatalf("the mended binding's subjects: %v (%v); want the user someone added kept", got.Subjects, err)
	}

	// Held by a finalizer while being deleted: the start warns, naming the
	// finalizer; once it is let go, the next start binds again.
	hold := "example.com/hold"
	if got, err = crbs.Get(ctx, clusteradmins.BindingName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	got.Finalizers = append(got.Finalizers, hold)
	if _, err := crbs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := crbs.Delete(ctx, clusteradmins.BindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var progress syncbuf.Buffer
	d := h.Handle()
	watched := ha.NewNode(ha.Env{Host: d, Checkpoint: d.Checkpoint, Progress: func(s string) { fmt.Fprintln(&progress, s) }})
	if _, err := watched.Up(ctx, ha.BootstrapOptions{}); err != nil {
		t.Fatalf("stratum up with the binding held by a finalizer while being deleted: %v; want a warning", err)
	}
	if !strings.Contains(progress.String(), "cluster admins bound: not done (warning:") || !strings.Contains(progress.String(), hold) {
		t.Fatalf("stratum up with the binding being deleted did not warn naming its finalizer %s:\n%s", hold, progress.String())
	}
	if got, err = crbs.Get(ctx, clusteradmins.BindingName, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	got.Finalizers = slices.DeleteFunc(got.Finalizers, func(f string) bool { return f == hold })
	if _, err := crbs.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	adminRefused(t, ctx, admin, "once the binding held by a finalizer went")
	upAgain("after the binding held by a finalizer went")
	adminCanWrite(t, ctx, admin, "after stratum up bound it again")

	// A control plane brought up by a stratum before the binding: its
	// admin.conf in system:masters, no binding. The renewal moves it over.
	writeMastersAdminConf(t, h)
	if err := crbs.Delete(ctx, clusteradmins.BindingName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := n.RenewCerts(ctx); err != nil {
		t.Fatalf("stratum certs renew of a control plane brought up before the binding: %v", err)
	}
	noMastersOnDisk(t, h)
	adminCanWrite(t, ctx, adminOnDisk(t, h), "after the renewal")
}

// writeMastersAdminConf writes on h the admin.conf a stratum before the
// stratum:cluster-admins binding wrote: kubernetes-admin in system:masters.
func writeMastersAdminConf(t *testing.T, h *sim.Host) {
	t.Helper()
	ca := clusterCAOn(t, h)
	certPEM, keyPEM, err := ca.Issue(pki.LeafSpec{CommonName: pki.AdminCN, Organization: []string{pki.MastersGroup}, Client: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	oldAdmin, err := kubeconfig.ForCert(h.APIServerURL(), ca.CertPEM, certPEM, keyPEM, pki.AdminCN)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Files().WriteFile(version.Kubeconfig(kubeconfig.Admin), oldAdmin, 0o600); err != nil {
		t.Fatal(err)
	}
}

// adminOnDisk is a clientset from the admin.conf on h, as kubectl reads it:
// its server, the cluster CA it carries, its client certificate.
func adminOnDisk(t *testing.T, h *sim.Host) kubernetes.Interface {
	t.Helper()
	kc, err := h.Files().ReadFile(version.Kubeconfig(kubeconfig.Admin))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeconfig.RESTConfig(kc)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfigOrDie(cfg)
}

// clusterCAOn is the cluster CA, with its key, on h.
func clusterCAOn(t *testing.T, h *sim.Host) *pki.CA {
	t.Helper()
	crt, err := h.Files().ReadFile(version.PKIFile(pki.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	key, err := h.Files().ReadFile(version.PKIFile(pki.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.LoadCA(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// superuserOn is a system:masters clientset on h's apiserver, minted from
// the CA on h: what root on a control plane can always make, standing in for
// an operator or an intruder who changes the binding.
func superuserOn(t *testing.T, h *sim.Host) kubernetes.Interface {
	t.Helper()
	ca := clusterCAOn(t, h)
	certPEM, keyPEM, err := ca.Issue(pki.LeafSpec{CommonName: "test-superuser", Organization: []string{pki.MastersGroup}, Client: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: h.APIServerURL(), Timeout: 10 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM, CertData: certPEM, KeyData: keyPEM}})
}

// adminCanWrite checks that admin creates and deletes a ConfigMap.
func adminCanWrite(t *testing.T, ctx context.Context, admin kubernetes.Interface, when string) {
	t.Helper()
	cm, err := admin.CoreV1().ConfigMaps("default").Create(ctx, probeConfigMap(), metav1.CreateOptions{})
	if err == nil {
		err = admin.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{})
	}
	if err != nil {
		t.Fatalf("the admin credential %s: %v", when, err)
	}
}

// adminRefused waits until admin's writes are forbidden: the RBAC
// authorizer learns of a binding's change through its informer.
func adminRefused(t *testing.T, ctx context.Context, admin kubernetes.Interface, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cm, err := admin.CoreV1().ConfigMaps("default").Create(ctx, probeConfigMap(), metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return
		}
		if err == nil {
			_ = admin.CoreV1().ConfigMaps("default").Delete(ctx, cm.Name, metav1.DeleteOptions{})
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admin credential %s: still allowed to write (%v); want forbidden, as RBAC decides", when, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noMastersOnDisk checks that no certificate stratum wrote on h, in its PKI
// directory or in a kubeconfig, is in system:masters.
func noMastersOnDisk(t *testing.T, h *sim.Host) {
	t.Helper()
	var certs [][]byte
	pkiDir := h.Path(version.PKIDir)
	err := filepath.WalkDir(pkiDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".crt") {
			return err
		}
		rel, _ := filepath.Rel(pkiDir, p)
		data, err := h.Files().ReadFile(version.PKIFile(rel))
		certs = append(certs, data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range kubeconfig.Names() {
		kc, err := h.Files().ReadFile(version.Kubeconfig(name))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := kubeconfig.RESTConfig(kc)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, cfg.CertData)
	}
	for _, data := range certs {
		crt, err := pki.ParseCert(data)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(crt.Subject.Organization, pki.MastersGroup) {
			t.Fatalf("%s on %s is in %s", crt.Subject, h.Name(), pki.MastersGroup)
		}
	}
}

// probeConfigMap is a ConfigMap of a fresh name, to probe a write with.
func probeConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "admin-probe-"}}
}
