package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	bootstrapapi "k8s.io/cluster-bootstrap/token/api"

	"stratum.dev/stratum/internal/apiretry"
	"stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/token"
)

// certsReader names the Role and RoleBinding (kube-system) that let the
// control-plane bootstrap group read stratum-certs and hold the fence.
const certsReader = "stratum:certs-reader"

// certsNamespace is where the Secret, the Role, the binding and the fence live.
const certsNamespace = "kube-system"

// joinFencePolicy names the ValidatingAdmissionPolicy and its binding that keep
// the control-plane bootstrap group to its own fence.
const joinFencePolicy = "stratum-join-fence"

// fenceMaxLeaseSeconds bounds the lease duration a bootstrap-group holder may
// write, so a leaked token cannot park the fence for long.
const fenceMaxLeaseSeconds = 900

// enforceWait bounds the wait for every probed apiserver to enforce the fence
// policy; enforceProbeInterval is the pause between rounds of probes.
const (
	enforceWait          = 60 * time.Second
	enforceProbeInterval = 100 * time.Millisecond
)

// certsReaderSubjects are the only subjects the certs-reader binding names.
var certsReaderSubjects = []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: token.ControlPlaneGroup}}

// fieldManager is stratum's field manager for server-side apply.
const fieldManager = "stratum"

// certsReaderRole is the certs-reader Role as stratum applies it. Its rules:
// get on the Secret; get and update on the fence Lease (update is what
// taking, renewing and releasing the fence is; admission keeps the group to
// its own holder identity).
func certsReaderRole() *rbacv1ac.RoleApplyConfiguration {
	return rbacv1ac.Role(certsReader, certsNamespace).WithRules(
		rbacv1ac.PolicyRule().WithAPIGroups("").WithResources("secrets").WithResourceNames(certsSecret).WithVerbs("get"),
		rbacv1ac.PolicyRule().WithAPIGroups(coordinationv1.GroupName).WithResources("leases").WithResourceNames(fenceLease).WithVerbs("get", "update"),
	)
}

// GrantCertsReader writes the stratum:certs-reader grant every upload
// publishes before the Secret: the admission policy that keeps the
// control-plane bootstrap group to its own fence, then — once every serving
// apiserver enforces it — the fence Lease (unheld, if absent), the Role and the
// RoleBinding. The enforcement is probed through cs and on every apiserver
// of this node's cluster that answers (Node.GrantCertsReader).
func GrantCertsReader(ctx context.Context, cs kubernetes.Interface) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.GrantCertsReader(ctx, cs)
}

// NarrowCertsReaderBinding rewrites an existing stratum:certs-reader
// RoleBinding to name only certsReaderSubjects and the certs-reader Role
// (replacing a binding whose immutable roleRef is wrong), and leaves an absent
// one absent.
func NarrowCertsReaderBinding(ctx context.Context, cs kubernetes.Interface) error {
	n, err := local()
	if err != nil {
		return err
	}
	return n.NarrowCertsReaderBinding(ctx, cs)
}

// GrantCertsReader is the package-level GrantCertsReader: it probes policy
// enforcement through cs and on every serving apiserver it finds through this
// node's etcd member list and admin kubeconfig (servingAPIServers), as an
// upload does. Every `stratum up` grants through it, on clusters of several
// apiservers too; one it cannot list is probed through cs alone, with a
// warning.
func (n *Node) GrantCertsReader(ctx context.Context, cs kubernetes.Interface) error {
	return n.GrantCertsReaderProbing(ctx, cs, n.servingAPIServers(ctx))
}

// GrantCertsReaderProbing is GrantCertsReader probing enforcement on each of
// the given apiservers (admin configs, one per serving apiserver) as well as
// through cs. Policy storage alone does not synchronize the admission caches
// of several apiservers, so a caller that knows them all passes them all.
func (n *Node) GrantCertsReaderProbing(ctx context.Context, cs kubernetes.Interface, apiservers []*rest.Config) error {
	if err := ensureJoinFencePolicy(ctx, cs); err != nil {
		return err
	}
	probes := []rest.Interface{cs.CoreV1().RESTClient()}
	for _, cfg := range apiservers {
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("grant certs reader: client for %s: %w; the policy is written, the Role is not", cfg.Host, err)
		}
		probes = append(probes, c.CoreV1().RESTClient())
	}
	if err := waitFenceEnforced(ctx, probes); err != nil {
		return fmt.Errorf("grant certs reader: %w; the Role was not written", err)
	}
	hosts := []string{"the client's own"}
	for _, cfg := range apiservers {
		hosts = append(hosts, cfg.Host)
	}
	n.log.Info("the join fence policy is enforced", "apiservers", strings.Join(hosts, " "))
	if err := ensureFenceLease(ctx, cs); err != nil {
		return err
	}
	// The Role is server-side applied, forced: stratum owns its rules, a
	// list the API replaces whole (listType=atomic), so whatever rules it
	// had are replaced by exactly these, while labels and annotations other
	// managers set are kept.
	err := apiretry.Ensure(ctx, func() error {
		_, err := cs.RbacV1().Roles(certsNamespace).Apply(ctx, certsReaderRole(), metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		return err
	})
	if err != nil {
		return fmt.Errorf("grant certs reader: write Role %s/%s: %w", certsNamespace, certsReader, err)
	}
	// The binding is created, or repaired by NarrowCertsReaderBinding,
	// which must read it first (see there), not applied. A create whose
	// answer was lost is sent again: it exists then, judged by the repair,
	// or it is created.
	err = apiretry.Ensure(ctx, func() error {
		_, err := cs.RbacV1().RoleBindings(certsNamespace).Create(ctx, certsReaderBinding(), metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		return n.NarrowCertsReaderBinding(ctx, cs)
	}
	if err != nil {
		return fmt.Errorf("grant certs reader: write RoleBinding %s/%s: %w", certsNamespace, certsReader, err)
	}
	return nil
}

// certsReaderRoleRef is the only role the certs-reader binding may name.
var certsReaderRoleRef = rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: certsReader}

// certsReaderBinding is the certs-reader RoleBinding as it must be.
func certsReaderBinding() *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: certsReader, Namespace: certsNamespace},
		RoleRef:    certsReaderRoleRef,
		Subjects:   slices.Clone(certsReaderSubjects),
	}
}

// NarrowCertsReaderBinding is the package-level NarrowCertsReaderBinding. A
// binding whose roleRef names anything but the certs-reader Role (another
// Role, a ClusterRole, another API group) is replaced: roleRef is immutable,
// so it is deleted — with a UID precondition, so exactly the binding judged
// wrong goes, and a replacement someone made meanwhile is judged afresh — and
// created again as it must be. A binding with the right roleRef has its
// subjects narrowed in place.
//
// It stays read-modify-write, not a server-side apply, although applying
// the subjects (listType=atomic) would prune them the same: a wrong roleRef
// must be read and judged to be replaced (it is immutable: an apply naming
// ours fails on it), an absent binding must stay absent (an apply creates
// it), and the Update carries the resourceVersion the binding was judged
// at, so one replaced meanwhile is a conflict, retried and judged afresh.
func (n *Node) NarrowCertsReaderBinding(ctx context.Context, cs kubernetes.Interface) error {
	rbs := cs.RbacV1().RoleBindings(certsNamespace)
	deleted := false
	err := apiretry.Ensure(ctx, func() error {
		b, err := rbs.Get(ctx, certsReader, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if deleted {
				// Ours was deleted and not yet recreated: finish the repair.
				_, err = rbs.Create(ctx, certsReaderBinding(), metav1.CreateOptions{})
				return raceAsConflict(err)
			}
			return nil
		}
		if err != nil {
			return err
		}
		if b.RoleRef != certsReaderRoleRef {
			n.log.Info("replacing certs-reader binding with a wrong roleRef", "roleRef", b.RoleRef, "subjects", b.Subjects)
			uid := b.UID
			err := rbs.Delete(ctx, certsReader, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if apierrors.IsNotFound(err) {
				// Gone meanwhile: judge what is there now.
				return apierrors.NewConflict(rbacv1.Resource("rolebindings"), certsReader, err)
			}
			if apiretry.LostConnection(err) {
				// It may have been deleted: an absent binding is then ours
				// to create, not one to leave absent.
				deleted = true
			}
			if err != nil {
				return err
			}
			deleted = true
			_, err = rbs.Create(ctx, certsReaderBinding(), metav1.CreateOptions{})
			return raceAsConflict(err)
		}
		if slices.Equal(b.Subjects, certsReaderSubjects) {
			return nil
		}
		n.log.Info("narrowing certs-reader binding", "was", b.Subjects)
		b.Subjects = slices.Clone(certsReaderSubjects)
		_, err = rbs.Update(ctx, b, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		if deleted {
			return fmt.Errorf("repair RoleBinding %s/%s: %w; the binding with the wrong roleRef was deleted and the right one not yet written, so no token can read the shared certificates until this is re-run (any `stratum token create` does)", certsNamespace, certsReader, err)
		}
		return fmt.Errorf("narrow RoleBinding %s/%s to %s: %w; the binding was not changed, re-run to retry", certsNamespace, certsReader, token.ControlPlaneGroup, err)
	}
	return nil
}

// fenceMetadataKept is the CEL test that an update of the fence Lease leaves
// every metadata field a client can set as it was: labels, annotations, owner
// references, finalizers and generateName. An absent field and an empty one
// are the same (a label map sent as {} grants nothing more than none), hence
// the optionals. The server keeps the rest of the metadata itself: name,
// namespace, uid, creationTimestamp, generation and the deletion fields are
// immutable or its own by the time validating admission runs, and
// managedFields it rewrites on every update — they record who wrote which
// field for server-side apply, and change what no reader of the fence acts on.
const fenceMetadataKept = `object.metadata.?labels.orValue({}) == oldObject.metadata.?labels.orValue({}) && ` +
	`object.metadata.?annotations.orValue({}) == oldObject.metadata.?annotations.orValue({}) && ` +
	`object.metadata.?ownerReferences.orValue([]) == oldObject.metadata.?ownerReferences.orValue([]) && ` +
	`object.metadata.?finalizers.orValue([]) == oldObject.metadata.?finalizers.orValue([]) && ` +
	`object.metadata.?generateName.orValue('') == oldObject.metadata.?generateName.orValue('')`

// fenceSpecKept is the CEL test that an update of the fence Lease changes no
// spec field but the holder's own: holderIdentity, acquireTime, renewTime,
// leaseDurationSeconds and leaseTransitions are what taking, renewing and
// releasing write; strategy and preferredHolder (coordinated leader election)
// are every other LeaseSpec field of coordination.k8s.io/v1 as of v1.37. A
// field added to LeaseSpec later must be added here.
const fenceSpecKept = `object.?spec.?strategy.orValue('') == oldObject.?spec.?strategy.orValue('') && ` +
	`object.?spec.?preferredHolder.orValue('') == oldObject.?spec.?preferredHolder.orValue('')`

// joinFencePolicyObject is the admission policy: a request from the
// control-plane bootstrap group may only update the fence Lease, set no holder
// but itself (or clear its own), take no Lease another holds unless the
// holder's lease had run out at the renew time written, write a lease
// duration of at most fenceMaxLeaseSeconds, and change nothing else: neither
// the Lease's metadata (fenceMetadataKept) nor a spec field that is not the
// holder's (fenceSpecKept). The bootstrap token may hold the fence; it may not
// decorate, own, pin or repurpose the object.
func joinFencePolicyObject() *admissionv1.ValidatingAdmissionPolicy {
	fail := admissionv1.Fail
	fence := fmt.Sprintf(`request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases' && (!has(request.subResource) || request.subResource == '') && request.namespace == '%s' && request.name == '%s' && request.operation == 'UPDATE'`, certsNamespace, fenceLease)
	return &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: joinFencePolicy},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.OperationAll},
						Rule:       admissionv1.Rule{APIGroups: []string{"*"}, APIVersions: []string{"*"}, Resources: []string{"*/*"}},
					},
				}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "control-plane-bootstrap-group",
				Expression: fmt.Sprintf(`request.userInfo.groups.exists(g, g == '%s')`, token.ControlPlaneGroup),
			}},
			Variables: []admissionv1.Variable{
				{Name: "isFence", Expression: fence},
				{Name: "newHolder", Expression: `(variables.isFence && has(object.spec) && has(object.spec.holderIdentity)) ? object.spec.holderIdentity : ''`},
				{Name: "oldHolder", Expression: `(variables.isFence && has(oldObject.spec) && has(oldObject.spec.holderIdentity)) ? oldObject.spec.holderIdentity : ''`},
				{Name: "oldRanOut", Expression: `variables.isFence && has(oldObject.spec.renewTime) && has(oldObject.spec.leaseDurationSeconds) && has(object.spec.renewTime) && timestamp(string(object.spec.renewTime)) >= timestamp(string(oldObject.spec.renewTime)) + duration(string(oldObject.spec.leaseDurationSeconds) + 's')`},
			},
			Validations: []admissionv1.Validation{
				{
					Expression: `variables.isFence`,
					Message:    fmt.Sprintf("%s may write nothing but an update of the Lease %s/%s", token.ControlPlaneGroup, certsNamespace, fenceLease),
					Reason:     ptr(metav1.StatusReasonForbidden),
				},
				{
					Expression: `!variables.isFence || variables.newHolder == request.userInfo.username || (variables.newHolder == '' && variables.oldHolder == request.userInfo.username)`,
					Message:    "a bootstrap token may set only itself as the fence's holder",
					Reason:     ptr(metav1.StatusReasonForbidden),
				},
				{
					Expression: `!variables.isFence || variables.oldHolder == '' || variables.oldHolder == request.userInfo.username || variables.oldRanOut`,
					Message:    fenceHeldDenial,
					Reason:     ptr(metav1.StatusReasonForbidden),
				},
				{
					Expression: fmt.Sprintf(`!variables.isFence || !has(object.spec.leaseDurationSeconds) || object.spec.leaseDurationSeconds <= %d`, fenceMaxLeaseSeconds),
					Message:    fmt.Sprintf("a bootstrap token may hold the fence for at most %d seconds at a time", fenceMaxLeaseSeconds),
					Reason:     ptr(metav1.StatusReasonForbidden),
				},
				{
					Expression: `!variables.isFence || (` + fenceMetadataKept + `)`,
					Message:    fmt.Sprintf("a bootstrap token may not change the fence Lease's metadata (labels, annotations, owner references, finalizers, generateName) of %s/%s", certsNamespace, fenceLease),
					Reason:     ptr(metav1.StatusReasonForbidden),
				},
				{
					Expression: `!variables.isFence || (` + fenceSpecKept + `)`,
					Message:    "a bootstrap token may change only the fence's holder fields (holderIdentity, acquireTime, renewTime, leaseDurationSeconds, leaseTransitions)",
					Reason:     ptr(metav1.StatusReasonForbidden),
				},
			},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// ensureJoinFencePolicy creates or updates the policy and its binding, each
// spec replaced whole by stratum's.
//
// They stay read-modify-write, not a server-side apply: an apply keeps the
// fields other field managers own that stratum does not set, and here such a
// field can switch the fence off: a policy matchCondition (a map list keyed
// by name) that never holds, or a binding's matchResources that exempts the
// fence Lease (excludeResourceRules, a namespaceSelector). Replacing the
// spec on every grant removes them, so each grant restores the policy
// exactly (TestGrantRestoresTamperedFencePolicy).
func ensureJoinFencePolicy(ctx context.Context, cs kubernetes.Interface) error {
	want := joinFencePolicyObject()
	api := cs.AdmissionregistrationV1()
	err := apiretry.Ensure(ctx, func() error {
		cur, err := api.ValidatingAdmissionPolicies().Get(ctx, joinFencePolicy, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.ValidatingAdmissionPolicies().Create(ctx, want, metav1.CreateOptions{})
			return raceAsConflict(err)
		}
		if err != nil {
			return err
		}
		cur.Spec = want.Spec
		_, err = api.ValidatingAdmissionPolicies().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("write admission policy %s: %w; no grant was written", joinFencePolicy, err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: joinFencePolicy},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        joinFencePolicy,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	err = apiretry.Ensure(ctx, func() error {
		cur, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, joinFencePolicy, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{})
			return raceAsConflict(err)
		}
		if err != nil {
			return err
		}
		cur.Spec = binding.Spec
		_, err = api.ValidatingAdmissionPolicyBindings().Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("write admission policy binding %s: %w; no grant was written", joinFencePolicy, err)
	}
	return nil
}

// errNotEnforced: a probe's dry-run write was admitted.
var errNotEnforced = errors.New("admission policy not enforced yet")

// probeFenceEnforced asks one apiserver, as a member of the control-plane
// bootstrap group (impersonated, with the cluster admins' group so RBAC
// passes and only admission can refuse; stratum acts as system:masters only
// to write that group's binding), to dry-run-create a ConfigMap. The policy must deny
// it; nothing is stored either way.
func probeFenceEnforced(ctx context.Context, rc rest.Interface) error {
	if c, ok := rc.(*rest.RESTClient); rc == nil || ok && c == nil {
		return errors.New("probe admission policy: the client has no REST transport to probe through (a fake clientset?)")
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{GenerateName: "stratum-join-fence-probe-", Namespace: certsNamespace},
	}
	body, err := json.Marshal(cm)
	if err != nil {
		return err
	}
	res := rc.Post().
		Namespace(certsNamespace).Resource("configmaps").
		Param("dryRun", metav1.DryRunAll).
		SetHeader("Impersonate-User", bootstrapapi.BootstrapUserPrefix+"stratum-fence-probe").
		SetHeader("Impersonate-Group", token.ControlPlaneGroup, pki.ClusterAdminsGroup, "system:authenticated").
		SetHeader("Content-Type", "application/json").
		Body(body).Do(ctx)
	err = res.Error()
	if err == nil {
		return errNotEnforced
	}
	if (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), joinFencePolicy) {
		return nil
	}
	return fmt.Errorf("probe admission policy %s: %w", joinFencePolicy, err)
}

// waitFenceEnforced waits until every probe sees the policy enforced.
func waitFenceEnforced(ctx context.Context, probes []rest.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, enforceWait)
	defer cancel()
	pending := slices.Clone(probes)
	var last error
	for {
		var still []rest.Interface
		for _, p := range pending {
			if err := probeFenceEnforced(ctx, p); err != nil {
				last = err
				still = append(still, p)
			}
		}
		if len(still) == 0 {
			return nil
		}
		pending = still
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d apiserver(s) did not enforce admission policy %s within %s (last: %v)", len(pending), joinFencePolicy, enforceWait, last)
		case <-time.After(enforceProbeInterval):
		}
	}
}

// raceAsConflict turns a create that lost a race (AlreadyExists) into a
// conflict, so apiretry.Ensure re-reads and updates what the winner
// wrote.
func raceAsConflict(err error) error {
	if apierrors.IsAlreadyExists(err) {
		return apierrors.NewConflict(schema.GroupResource{}, "", err)
	}
	return err
}

// deletionAsConflict is an update's NotFound as a conflict: the object was
// deleted since it was read (the operator collects the shared certificates
// once their last join token is gone), so the retry reads again and creates
// it.
func deletionAsConflict(err error) error {
	if apierrors.IsNotFound(err) {
		return apierrors.NewConflict(schema.GroupResource{}, "", err)
	}
	return err
}
