package noderelease

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestRecordThenList: a node's release is recorded, replaced at its next
// start, and listed by node; other Leases in kube-system are not.
func TestRecordThenList(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "kube-vip", Namespace: Namespace}})
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	cp1 := Release{Node: "cp1", MemberID: "8e9e05c52164694d", Stratum: "v1.0.0", Etcd: "v3.7.3", APIServer: "v1.37.2", BinDir: "/var/lib/stratum/bin", Since: t0}
	cp2 := Release{Node: "cp2", Stratum: "v1.0.0", Etcd: "v3.7.3", APIServer: "v1.37.2", BinDir: "/var/lib/stratum/bin", Since: t0}
	for _, r := range []Release{cp1, cp2} {
		if err := Record(ctx, cs, r); err != nil {
			t.Fatal(err)
		}
	}
	upgraded := cp1
	upgraded.Stratum, upgraded.BinDir, upgraded.Since = "v1.1.0", "/opt/stratum/v1.1.0/bin", t0.Add(time.Hour)
	if err := Record(ctx, cs, upgraded); err != nil {
		t.Fatal(err)
	}
	got, err := List(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["cp1"].Since.Equal(upgraded.Since) || got["cp1"].Stratum != "v1.1.0" || got["cp1"].BinDir != upgraded.BinDir || got["cp1"].MemberID != "8e9e05c52164694d" || got["cp2"].Stratum != "v1.0.0" || got["cp2"].Etcd != "v3.7.3" || got["cp2"].APIServer != "v1.37.2" {
		t.Fatalf("List = %+v, want cp1 upgraded and cp2 as recorded, nothing else", got)
	}
	for range 2 { // the second finds it gone
		if err := Forget(ctx, cs, "cp2"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := List(ctx, cs); len(got) != 1 || got["cp1"].Stratum != "v1.1.0" {
		t.Fatalf("List after cp2 was forgotten = %+v, want cp1 alone", got)
	}
	if err := Record(ctx, cs, Release{}); err == nil {
		t.Fatal("a release of no node was recorded")
	}
}

// TestForgetMemberKeepsAnotherMembersRecord: a removed member's record is
// deleted when it names that member or none; one naming another member
// under the same name (the node joined again since) is kept, and none at
// all is no error.
func TestForgetMemberKeepsAnotherMembersRecord(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	for _, r := range []Release{{Node: "cp2", MemberID: "aa"}, {Node: "cp3", MemberID: "bb"}, {Node: "cp4"}} {
		if err := Record(ctx, cs, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		node, member string
		deleted      bool
	}{
		{"cp2", "cc", false}, // cp2 is member aa now
		{"cp3", "bb", true},
		{"cp4", "dd", true}, // no member recorded
		{"cp5", "ee", false},
	} {
		if got, err := ForgetMember(ctx, cs, c.node, c.member); err != nil || got != c.deleted {
			t.Fatalf("ForgetMember(%s, %s) = %v, %v; want %v", c.node, c.member, got, err, c.deleted)
		}
	}
	if got, _ := List(ctx, cs); len(got) != 1 || got["cp2"].MemberID != "aa" {
		t.Fatalf("records left: %+v, want cp2's alone", got)
	}
}
