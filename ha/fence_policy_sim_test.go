package ha_test

import (
	"context"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/internal/token"
	"stratum.dev/stratum/sim"
)

// bootstrapClient creates a live bootstrap token in groups and returns a
// client authenticating with it once the apiserver accepts it, and its ID.
func (e *certsEnv) bootstrapClient(groups ...string) (kubernetes.Interface, string) {
	e.t.Helper()
	tok, err := sim.CreateBootstrapToken(e.ctx, e.admin, groups, time.Now().Add(time.Hour))
	if err != nil {
		e.t.Fatal(err)
	}
	e.waitAuthenticated(tok)
	id, _, err := token.ParseToken(tok)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.tokenClient(tok), id
}

// fenceLease reads the fence Lease through cs.
func fenceLease(ctx context.Context, t *testing.T, cs kubernetes.Interface) *coordinationv1.Lease {
	t.Helper()
	l, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("read the fence Lease: %v", err)
	}
	return l
}

// updateFence reads the fence Lease through cs, applies edit and writes it.
func updateFence(ctx context.Context, cs kubernetes.Interface, edit func(*coordinationv1.Lease)) error {
	leases := cs.CoordinationV1().Leases("kube-system")
	l, err := leases.Get(ctx, ha.FenceLeaseName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	edit(l)
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// setKey sets k in the map at m, making the map when there is none.
func setKey(m *map[string]string, k, v string) {
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[k] = v
}

// TestFencePolicyGuardsWholeLease: a control-plane bootstrap token holding the
// fence may take, renew and release it, and admission denies it every other
// change to the Lease: its metadata (labels, annotations, owner references,
// finalizers, generateName) and every spec field but the holder's.
func TestFencePolicyGuardsWholeLease(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	// What an admin put on the Lease, which no token may change.
	if err := updateFence(ctx, e.admin, func(l *coordinationv1.Lease) {
		l.Labels = map[string]string{"stratum.dev/set-by": "admin"}
		l.Annotations = map[string]string{"stratum.dev/note": "admin"}
	}); err != nil {
		t.Fatal(err)
	}
	cs, id := e.bootstrapClient(token.ControlPlaneGroup)
	me := "system:bootstrap:" + id
	now := func() *metav1.MicroTime { t := metav1.NewMicroTime(time.Now()); return &t }

	// Take: the holder fields only.
	if err := updateFence(ctx, cs, func(l *coordinationv1.Lease) {
		secs, transitions := int32(60), int32(1)
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.LeaseTransitions = &me, &secs, &transitions
		l.Spec.AcquireTime, l.Spec.RenewTime = now(), now()
	}); err != nil {
		t.Fatalf("token taking the free fence: %v", err)
	}

	const metaDenied = "may not change the fence Lease's metadata"
	const specDenied = "may change only the fence's holder fields"
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: "anything", UID: "6a1f3c4e-0000-4000-8000-000000000001"}
	for _, tc := range []struct {
		name string
		edit func(*coordinationv1.Lease)
		want string
		// dropped reports whether the server dropped the field the edit set
		// (a field behind a disabled feature gate), so admission never saw it.
		dropped func(*coordinationv1.Lease) bool
	}{
		{"add a label", func(l *coordinationv1.Lease) { setKey(&l.Labels, "planted", "x") }, metaDenied, nil},
		{"change a label", func(l *coordinationv1.Lease) { setKey(&l.Labels, "stratum.dev/set-by", "token") }, metaDenied, nil},
		{"remove the labels", func(l *coordinationv1.Lease) { l.Labels = nil }, metaDenied, nil},
		{"add an annotation", func(l *coordinationv1.Lease) { setKey(&l.Annotations, "planted", "x") }, metaDenied, nil},
		{"remove the annotations", func(l *coordinationv1.Lease) { l.Annotations = nil }, metaDenied, nil},
		{"add an owner reference", func(l *coordinationv1.Lease) { l.OwnerReferences = []metav1.OwnerReference{owner} }, metaDenied, nil},
		{"add a finalizer", func(l *coordinationv1.Lease) { l.Finalizers = []string{"stratum.dev/keep"} }, metaDenied, nil},
		{"set generateName", func(l *coordinationv1.Lease) { l.GenerateName = "planted-" }, metaDenied, nil},
		{"renew and add a label", func(l *coordinationv1.Lease) { l.Spec.RenewTime = now(); setKey(&l.Labels, "planted", "x") }, metaDenied, nil},
		{"release and add a finalizer", func(l *coordinationv1.Lease) {
			l.Spec.HolderIdentity = nil
			l.Finalizers = []string{"stratum.dev/keep"}
		}, metaDenied, nil},
		{"set preferredHolder", func(l *coordinationv1.Lease) { l.Spec.PreferredHolder = &me }, specDenied,
			func(l *coordinationv1.Lease) bool { return l.Spec.PreferredHolder == nil }},
		{"set strategy", func(l *coordinationv1.Lease) {
			s := coordinationv1.OldestEmulationVersion
			l.Spec.Strategy = &s
		}, specDenied, func(l *coordinationv1.Lease) bool { return l.Spec.Strategy == nil }},
	} {
		before := fenceLease(ctx, t, e.admin)
		err := updateFence(ctx, cs, tc.edit)
		after := fenceLease(ctx, t, e.admin)
		switch {
		case err == nil && tc.dropped != nil && tc.dropped(after):
			t.Logf("%s: the server dropped the field before admission (feature gate off)", tc.name)
		case err == nil:
			t.Errorf("token allowed to %s", tc.name)
		case !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err), !strings.Contains(err.Error(), ha.JoinFencePolicy), !strings.Contains(err.Error(), tc.want):
			t.Errorf("token trying to %s: %v, want the %s policy's denial %q", tc.name, err, ha.JoinFencePolicy, tc.want)
		case after.ResourceVersion != before.ResourceVersion:
			t.Errorf("token trying to %s: denied, yet the Lease changed (%s -> %s)", tc.name, before.ResourceVersion, after.ResourceVersion)
		}
	}

	// Renew and release: still allowed, and what the admin set survives.
	if err := updateFence(ctx, cs, func(l *coordinationv1.Lease) { l.Spec.RenewTime = now() }); err != nil {
		t.Fatalf("token renewing its fence: %v", err)
	}
	if err := updateFence(ctx, cs, func(l *coordinationv1.Lease) { l.Spec.HolderIdentity = nil }); err != nil {
		t.Fatalf("token releasing its fence: %v", err)
	}
	l := fenceLease(ctx, t, e.admin)
	if l.Spec.HolderIdentity != nil || l.Labels["stratum.dev/set-by"] != "admin" || l.Annotations["stratum.dev/note"] != "admin" ||
		len(l.Labels) != 1 || len(l.Annotations) != 1 || len(l.OwnerReferences) != 0 || len(l.Finalizers) != 0 {
		t.Fatalf("fence Lease after the token's release: holder %v, labels %v, annotations %v, owners %v, finalizers %v",
			l.Spec.HolderIdentity, l.Labels, l.Annotations, l.OwnerReferences, l.Finalizers)
	}
}
