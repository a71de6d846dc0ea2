package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/token"
)

// TestTokenListAndDelete against a real apiserver: list shows both kinds of
// token and never a secret; delete revokes a control-plane grant's token and
// drops its entry from the shared-certificate Secret; an unknown ID changes
// nothing, a malformed one is a usage error; a delete the cluster refuses is
// reported as not done.
func TestTokenListAndDelete(t *testing.T) {
	t.Parallel() // its own simulated cluster or host
	_, cp1, opts := upOneControlPlane(t, 1)
	d := cp1.Handle()
	mint := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, opts, append([]string{"token", "create"}, args...)...)
		if code != ExitOK {
			t.Fatalf("token create %v: exit %d\n%s", args, code, errOut)
		}
		return mintedID(out)
	}
	cpID, workerID := mint("--control-plane"), mint()

	code, out, errOut := runCLI(t, opts, "token", "list", "-o", "json")
	if code != ExitOK {
		t.Fatalf("token list: exit %d\n%s", code, errOut)
	}
	var list []token.Info
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("token list -o json: %v\n%s", err, out)
	}
	kinds := map[string]string{}
	for _, i := range list {
		kinds[i.ID] = i.Kind
		if !i.Live || i.Expires == nil {
			t.Errorf("fresh token %s listed as not live or never expiring: %+v", i.ID, i)
		}
	}
	if kinds[cpID] != "control-plane" || kinds[workerID] != "worker" {
		t.Fatalf("token list kinds %v, want %s control-plane and %s worker", kinds, cpID, workerID)
	}
	if code, out, _ := runCLI(t, opts, "token", "list"); code != ExitOK || !strings.Contains(out, cpID) || strings.Contains(out, ".") && strings.Contains(out, cpID+".") {
		t.Fatalf("token list table: exit %d\n%s", code, out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := adminClient(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	certs := func() (rv string, entries map[string]bool) {
		s, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "stratum-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		entries = map[string]bool{}
		for k := range s.Data {
			entries[k] = true
		}
		return s.ResourceVersion, entries
	}
	if _, e := certs(); !e[certbundle.GrantEntryPrefix+cpID] {
		t.Fatalf("the grant of %s has no entry in stratum-certs: %v", cpID, e)
	}

	rv, _ := certs()
	if code, _, errOut := runCLI(t, opts, "token", "delete", "zzzzzz"); code != ExitFail || !strings.Contains(errOut, "no such bootstrap token zzzzzz") {
		t.Fatalf("delete of an unknown token: exit %d\n%s", code, errOut)
	}
	if code, _, _ := runCLI(t, opts, "token", "delete", "Bad-ID"); code != ExitUsage {
		t.Fatalf("delete of a malformed ID: exit %d, want %d", code, ExitUsage)
	}
	if got, _ := certs(); got != rv {
		t.Fatalf("refused deletes changed stratum-certs (resourceVersion %s -> %s)", rv, got)
	}
	if n := len(list); n != 2 {
		t.Fatalf("listed %d tokens, want 2", n)
	}

	// The same ID twice (a paste): deleted once, exit 0.
	if code, out, errOut := runCLI(t, opts, "token", "delete", cpID, cpID); code != ExitOK || strings.Count(out, "deleted token "+cpID) != 1 ||
		!strings.Contains(out, "dropped the grant entries of expired or deleted tokens: "+cpID) {
		t.Fatalf("token delete %s: exit %d\n%s\n%s", cpID, code, out, errOut)
	}
	if _, err := cs.CoreV1().Secrets(token.Namespace).Get(ctx, token.SecretPrefix+cpID, metav1.GetOptions{}); err == nil {
		t.Fatalf("token %s still exists after delete", cpID)
	}
	if _, e := certs(); e[certbundle.GrantEntryPrefix+cpID] {
		t.Fatalf("the deleted token's grant entry is still in stratum-certs: %v", e)
	}
	// The delete said which grant entry it dropped; a prune with nothing
	// left to drop says so, not that it pruned.
	if code, out, errOut := runCLI(t, opts, "grants", "prune"); code != ExitOK || !strings.Contains(out, "no grant to prune") {
		t.Fatalf("grants prune with nothing to prune: exit %d\n%s\n%s", code, out, errOut)
	}

	// A delete the cluster refuses (an admission policy here) fails, and
	// says the token was not deleted, never that it was.
	denyTokenDelete(ctx, t, cs, workerID)
	code, out, errOut = runCLI(t, opts, "token", "delete", workerID)
	if code != ExitFail || !strings.Contains(errOut, "NOT deleted, still valid until it expires: "+workerID) || strings.Contains(out, "deleted token") {
		t.Fatalf("token delete the cluster refuses: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := cs.CoreV1().Secrets(token.Namespace).Get(ctx, token.SecretPrefix+workerID, metav1.GetOptions{}); err != nil {
		t.Fatalf("the token whose delete was refused: %v", err)
	}
}

// denyTokenDelete makes the apiserver refuse, through a validating admission
// policy, the delete of token id's Secret, and waits until it does.
func denyTokenDelete(ctx context.Context, t *testing.T, cs kubernetes.Interface, id string) {
	t.Helper()
	api := cs.AdmissionregistrationV1()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-token-delete"},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Delete},
					Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"secrets"}},
				},
			}}},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("oldObject.metadata.name != '%s%s'", token.SecretPrefix, id), Message: "this token may not be deleted"}},
		},
	}
	if _, err := api.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-token-delete"},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: "deny-token-delete", ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	if _, err := api.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		err := cs.CoreV1().Secrets(token.Namespace).Delete(ctx, token.SecretPrefix+id, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the policy denying the delete of token %s was not enforced: %v", id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
