// Package clusteradmins binds the group of every control plane's admin
// credential, pki.ClusterAdminsGroup, to Kubernetes' cluster-admin
// ClusterRole. The admin kubeconfig and the apiserver's kubelet client are
// then authorized by RBAC, not by the superuser group system:masters, which
// the apiserver admits before any authorizer: a binding taken away revokes
// them, and an audit names the binding that let them in. kubeadm binds its
// admin.conf the same way (kubeadm:cluster-admins) since 1.29.
//
// The binding has to exist before the admin credential can do anything,
// including write it: Ensure writes it with a system:masters certificate it
// mints in memory from the cluster CA, valid for minutes and never written
// to disk, only when the admin credential cannot read a binding that is as
// it must be (a first control plane, a cluster brought up by a stratum
// before the binding, a binding someone deleted).
package clusteradmins

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"stratum.dev/stratum/internal/pki"
)

const (
	// BindingName names the ClusterRoleBinding, after the group it binds.
	BindingName = pki.ClusterAdminsGroup
	// clusterAdminRole is the ClusterRole the group is bound to, one of
	// the apiserver's bootstrap roles: every verb on every resource.
	clusterAdminRole = "cluster-admin"
	// WriterCN is the common name of the in-memory system:masters
	// certificate that writes the binding, as the apiserver's audit log
	// shows it.
	WriterCN = "stratum:cluster-admins-binder"
	// writerValidity is how long that certificate is valid.
	writerValidity = 10 * time.Minute
	// authorizedWithin bounds the wait, after a write, for the apiserver's
	// RBAC authorizer (fed by an informer) to admit the admin credential.
	authorizedWithin = 10 * time.Second
	// authorizedPoll is how often that wait asks.
	authorizedPoll = 50 * time.Millisecond
)

// Binding is the ClusterRoleBinding as it must be: pki.ClusterAdminsGroup
// bound to the cluster-admin ClusterRole.
func Binding() *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: BindingName},
		RoleRef:    roleRef(),
		Subjects:   []rbacv1.Subject{groupSubject()},
	}
}

func roleRef() rbacv1.RoleRef {
	return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterAdminRole}
}

func groupSubject() rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: pki.ClusterAdminsGroup}
}

// bound reports whether b binds the group to cluster-admin and is not being
// deleted. Subjects someone added beside the group are theirs to keep.
func bound(b *rbacv1.ClusterRoleBinding) bool {
	return b.RoleRef == roleRef() && slices.Contains(b.Subjects, groupSubject()) && b.DeletionTimestamp == nil
}

// Ensure makes sure the binding is as Binding says and the admin credential
// is authorized through it, and reports whether it wrote the binding. admin
// is a client config with the admin credential aimed at one apiserver (a
// control plane's own, which answers before the VIP does). When admin reads
// a binding that is as it must be, nothing is written and nothing is
// minted. When the binding is absent or changed, or admin is forbidden to
// read it (it is not bound), clusterCA is loaded, a system:masters
// certificate is minted from it for the write (WriterCN, valid for
// minutes, never written anywhere), the binding is created or mended, and
// Ensure waits until the apiserver authorizes admin for every verb on every
// resource. An admin credential the apiserver does not authenticate
// (expired, another cluster's) is refused before anything is minted; other
// read errors (an apiserver that just became ready dropping a connection)
// are read again for up to readWithin. Idempotent: two control planes
// ensuring it at once both end with the one binding.
func Ensure(ctx context.Context, admin *rest.Config, clusterCA func() (*pki.CA, error), now time.Time) (wrote bool, err error) {
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return false, fmt.Errorf("bind %s: %w", pki.ClusterAdminsGroup, err)
	}
	got, err := readBinding(ctx, cs)
	switch {
	case err == nil && bound(got):
		return false, nil
	case apierrors.IsUnauthorized(err):
		return false, fmt.Errorf("bind %s: %w; nothing was written", pki.ClusterAdminsGroup, notAuthenticated(err))
	case err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
		return false, fmt.Errorf("bind %s: read the ClusterRoleBinding %s with the admin credential: %w; nothing was written", pki.ClusterAdminsGroup, BindingName, err)
	}
	writer, err := superuser(admin, clusterCA, now)
	if err != nil {
		return false, fmt.Errorf("bind %s: %w; nothing was written", pki.ClusterAdminsGroup, err)
	}
	wrote, err = write(ctx, writer)
	if err != nil {
		return wrote, fmt.Errorf("bind %s: write the ClusterRoleBinding %s: %w", pki.ClusterAdminsGroup, BindingName, err)
	}
	if err := waitAuthorized(ctx, cs); err != nil {
		return wrote, fmt.Errorf("bind %s: the ClusterRoleBinding %s is as it must be, but %w", pki.ClusterAdminsGroup, BindingName, err)
	}
	return wrote, nil
}

// readWithin bounds how long Ensure reads the binding again after an error
// that is no answer about it; readPoll is how often.
const (
	readWithin = 10 * time.Second
	readPoll   = 200 * time.Millisecond
)

// readBinding reads the binding through cs, again while the apiserver gives
// no answer about it (a dropped connection, a 5xx, a 429), up to readWithin.
func readBinding(ctx context.Context, cs kubernetes.Interface) (*rbacv1.ClusterRoleBinding, error) {
	deadline := time.Now().Add(readWithin)
	for {
		got, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, BindingName, metav1.GetOptions{})
		answered := err == nil || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err)
		if answered || time.Now().After(deadline) {
			return got, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last answer: %v)", ctx.Err(), err)
		case <-time.After(readPoll):
		}
	}
}

// notAuthenticated says what an Unauthorized answer to the admin credential
// means and what to do.
func notAuthenticated(err error) error {
	return fmt.Errorf("the admin credential is not authenticated (%w): it has expired or is not from this cluster's CA; run `stratum certs renew` on this control plane", err)
}

// superuser is admin with a fresh system:masters client certificate from
// clusterCA in place of admin's credentials.
func superuser(admin *rest.Config, clusterCA func() (*pki.CA, error), now time.Time) (*rest.Config, error) {
	ca, err := clusterCA()
	if err != nil {
		return nil, fmt.Errorf("load the cluster CA to write the binding with: %w", err)
	}
	certPEM, keyPEM, err := ca.Issue(pki.LeafSpec{
		CommonName: WriterCN, Organization: []string{pki.MastersGroup}, Client: true, Validity: writerValidity,
	}, now)
	if err != nil {
		return nil, fmt.Errorf("mint the certificate to write the binding with: %w", err)
	}
	cfg := rest.AnonymousClientConfig(admin) // the server, its CA, the dialer, the timeout
	cfg.CertData, cfg.KeyData = certPEM, keyPEM
	return cfg, nil
}

// writePasses bounds write's reads of the binding: a race with another
// writer (a second control plane ensuring it too) is read again, and a
// binding that names another role takes a pass to delete.
const writePasses = 4

// write creates or mends the binding through cfg and reports whether it
// changed anything. A binding whose roleRef names another role (immutable)
// is deleted, with a UID precondition so exactly the binding read goes, and
// created again, with the group alone; one of the right role missing the
// group gets it added, the subjects someone put beside it kept. A binding
// being deleted (held by a finalizer) is refused, naming its finalizers.
func write(ctx context.Context, cfg *rest.Config) (changed bool, err error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return false, err
	}
	crbs := cs.RbacV1().ClusterRoleBindings()
	for pass := 1; ; pass++ {
		got, err := crbs.Get(ctx, BindingName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = crbs.Create(ctx, Binding(), metav1.CreateOptions{FieldManager: fieldManager})
		case err != nil:
			return changed, err
		case got.DeletionTimestamp != nil:
			return changed, fmt.Errorf("it is being deleted, held by the finalizers %v: remove them, then start this control plane again", got.Finalizers)
		case bound(got):
			return changed, nil
		case got.RoleRef != roleRef():
			uid := got.UID
			err = crbs.Delete(ctx, BindingName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		default:
			mended := got.DeepCopy()
			mended.Subjects = append(mended.Subjects, groupSubject())
			_, err = crbs.Update(ctx, mended, metav1.UpdateOptions{FieldManager: fieldManager})
		}
		raced := apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err)
		switch {
		case err == nil:
			changed = true // a delete is followed by its create on the next pass
		case !raced:
			return changed, err
		}
		if pass >= writePasses {
			return changed, fmt.Errorf("still not as it must be after %d passes (another writer changes it meanwhile?)", pass)
		}
	}
}

// fieldManager is stratum's field manager for what it writes.
const fieldManager = "stratum"

// waitAuthorized waits until cs (the admin credential) is allowed every verb
// on every resource, up to authorizedWithin: a binding just written reaches
// the RBAC authorizer through its informer. An admin credential the
// apiserver does not authenticate (expired, from another CA) fails at once.
func waitAuthorized(ctx context.Context, cs kubernetes.Interface) error {
	deadline := time.Now().Add(authorizedWithin)
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"},
	}}
	for {
		got, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		switch {
		case apierrors.IsUnauthorized(err):
			return notAuthenticated(err)
		case err == nil && got.Status.Allowed:
			return nil
		}
		if err == nil {
			err = errors.New("denied: " + got.Status.Reason)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the admin credential is still not allowed everything after %s: %w", authorizedWithin, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the wait for the admin credential to be allowed everything: %w (last answer: %v)", ctx.Err(), err)
		case <-time.After(authorizedPoll):
		}
	}
}
