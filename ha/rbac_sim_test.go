package ha_test

import (
	"slices"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"stratum.dev/stratum/ha"
	"stratum.dev/stratum/sim"
)

// TestGrantAppliesCertsReaderRole: the grant server-side applies the
// certs-reader Role as field manager "stratum", forced: a Role of that name
// with other rules gets exactly stratum's, a label another manager set is
// kept, and a grant that changes nothing writes nothing.
func TestGrantAppliesCertsReaderRole(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	roles := e.admin.RbacV1().Roles("kube-system")
	if _, err := roles.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "stratum:certs-reader", Labels: map[string]string{"team": "platform"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}}},
	}, metav1.CreateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	r, err := roles.Get(ctx, "stratum:certs-reader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"stratum-certs"}, Verbs: []string{"get"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{ha.FenceLeaseName}, Verbs: []string{"get", "update"}},
	}
	if !slices.EqualFunc(r.Rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
			slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs) && len(a.NonResourceURLs) == 0
	}) {
		t.Fatalf("rules after the grant: %+v, want exactly %+v", r.Rules, want)
	}
	if r.Labels["team"] != "platform" {
		t.Errorf("another manager's label was dropped: %v", r.Labels)
	}
	if !slices.ContainsFunc(r.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
		return m.Manager == "stratum" && m.Operation == metav1.ManagedFieldsOperationApply
	}) {
		t.Errorf("no server-side apply by field manager stratum in %+v", r.ManagedFields)
	}
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	if again, err := roles.Get(ctx, "stratum:certs-reader", metav1.GetOptions{}); err != nil || again.ResourceVersion != r.ResourceVersion {
		t.Errorf("a second grant rewrote the Role (%v)", err)
	}
}

// TestGrantRestoresTamperedFencePolicy: a grant replaces the admission
// policy's and its binding's specs whole, so what another writer added to
// switch the fence off — a match condition that never holds, a binding that
// excludes Leases — is gone after the next grant (a server-side apply would
// keep both: another manager owns them).
func TestGrantRestoresTamperedFencePolicy(t *testing.T) {
	t.Parallel() // its own simulated cluster
	e := startCerts(t, sim.Config{ControlPlanes: 1, APIServers: true})
	ctx := e.ctx
	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	api := e.admin.AdmissionregistrationV1()
	p, err := api.ValidatingAdmissionPolicies().Get(ctx, ha.JoinFencePolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.MatchConditions = append(p.Spec.MatchConditions, admissionv1.MatchCondition{Name: "tampered", Expression: "false"})
	if _, err := api.ValidatingAdmissionPolicies().Update(ctx, p, metav1.UpdateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}
	b, err := api.ValidatingAdmissionPolicyBindings().Get(ctx, ha.JoinFencePolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.MatchResources = &admissionv1.MatchResources{ExcludeResourceRules: []admissionv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.OperationAll},
			Rule:       admissionv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"leases"}},
		},
	}}}
	if _, err := api.ValidatingAdmissionPolicyBindings().Update(ctx, b, metav1.UpdateOptions{FieldManager: "someone-else"}); err != nil {
		t.Fatal(err)
	}

	if err := e.node.GrantCertsReader(ctx, e.admin); err != nil {
		t.Fatal(err)
	}
	p, err = api.ValidatingAdmissionPolicies().Get(ctx, ha.JoinFencePolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.MatchConditions) != 1 || p.Spec.MatchConditions[0].Name != "control-plane-bootstrap-group" {
		t.Errorf("policy match conditions after the grant: %+v, want only control-plane-bootstrap-group", p.Spec.MatchConditions)
	}
	b, err = api.ValidatingAdmissionPolicyBindings().Get(ctx, ha.JoinFencePolicy, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec.MatchResources != nil && len(b.Spec.MatchResources.ExcludeResourceRules) > 0 {
		t.Errorf("binding still excludes %+v after the grant", b.Spec.MatchResources.ExcludeResourceRules)
	}
}
