package ha_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// TestNarrowCertsReaderBindingRepairsRoleRef: a stratum:certs-reader binding
// whose roleRef names another role — with the right subjects or with too
// many — is replaced by one naming the certs-reader Role and the
// control-plane group only, and the tokens' access follows.
func TestNarrowCertsReaderBindingRepairsRoleRef(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	rbs := e.admin.RbacV1().RoleBindings("kube-system")
	if _, err := e.admin.RbacV1().Roles("kube-system").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "stratum:wide"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cp, _ := e.bootstrapClient(token.ControlPlaneGroup)
	worker, _ := e.bootstrapClient(token.WorkerGroup)
	readUnrelated := func(cs kubernetes.Interface) error {
		_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "unrelated", metav1.GetOptions{})
		return err
	}
	readFence := func(cs kubernetes.Interface) error {
		_, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
		return err
	}
	want := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "stratum:certs-reader"}
	cpGroup := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: token.ControlPlaneGroup}
	workerGroup := rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: token.WorkerGroup}
	for _, tc := range []struct {
		name     string
		roleRef  rbacv1.RoleRef
		subjects []rbacv1.Subject
	}{
		{"another Role, right subjects", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "stratum:wide"}, []rbacv1.Subject{cpGroup}},
		{"a ClusterRole of the same name, worker group too", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "stratum:certs-reader"}, []rbacv1.Subject{cpGroup, workerGroup}},
		{"cluster-admin, worker group too", rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"}, []rbacv1.Subject{cpGroup, workerGroup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := rbs.Delete(ctx, "stratum:certs-reader", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if _, err := rbs.Create(ctx, &rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: "stratum:certs-reader"},
				RoleRef:    tc.roleRef, Subjects: tc.subjects,
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.roleRef.Name != "stratum:certs-reader" {
				// The wrong binding is live: the token reads what it must not.
				certsEventually(t, ctx, "the wrong binding lets the control-plane token read another Secret", func() error { return readUnrelated(cp) })
			}
			if err := e.node.NarrowCertsReaderBinding(ctx, e.admin); err != nil {
				t.Fatal(err)
			}
			b, err := rbs.Get(ctx, "stratum:certs-reader", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if b.RoleRef != want || len(b.Subjects) != 1 || b.Subjects[0] != cpGroup {
				t.Fatalf("after narrowing: roleRef %+v subjects %+v, want %+v and only %s", b.RoleRef, b.Subjects, want, token.ControlPlaneGroup)
			}
			certsEventually(t, ctx, "the control-plane token is refused another Secret", func() error {
				if err := readUnrelated(cp); !apierrors.IsForbidden(err) {
					return fmt.Errorf("reading another Secret: %v, want Forbidden", err)
				}
				return nil
			})
			certsEventually(t, ctx, "the worker token is refused the fence", func() error {
				if err := readFence(worker); !apierrors.IsForbidden(err) {
					return fmt.Errorf("worker reading the fence: %v, want Forbidden", err)
				}
				if err := readUnrelated(worker); !apierrors.IsForbidden(err) {
					return fmt.Errorf("worker reading another Secret: %v, want Forbidden", err)
				}
				return nil
			})
			if err := readFence(cp); err != nil {
				t.Fatalf("control-plane token reading the fence through the repaired binding: %v", err)
			}
			// A right binding is left as it is.
			if err := e.node.NarrowCertsReaderBinding(ctx, e.admin); err != nil {
				t.Fatal(err)
			}
			if again, _ := rbs.Get(ctx, "stratum:certs-reader", metav1.GetOptions{}); again == nil || again.ResourceVersion != b.ResourceVersion {
				t.Fatalf("narrowing a right binding rewrote it")
			}
		})
	}
}
