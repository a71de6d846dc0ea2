package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
)

func joinedState() *nodestate.NodeState {
	return &nodestate.NodeState{
		NodeName: "cp2", NodeIP: "198.18.0.12", Server: "https://198.18.0.100:6443",
		ServiceCIDR: "10.96.0.0/12", ClusterDomain: "example.internal",
		Etcd: nodestate.Etcd{
			Name: "cp2", PeerURL: "https://198.18.0.12:2380", ClientURL: "https://198.18.0.12:2379",
			InitialCluster:      "cp1=https://198.18.0.11:2380,cp2=https://198.18.0.12:2380",
			InitialClusterState: "existing",
		},
	}
}

func TestEtcdArgsFromNodeState(t *testing.T) {
	args, err := EtcdArgs(joinedState())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--name=cp2",
		"--data-dir=/var/lib/stratum/etcd",
		"--listen-client-urls=https://198.18.0.12:2379",
		"--initial-cluster=cp1=https://198.18.0.11:2380,cp2=https://198.18.0.12:2380",
		"--initial-cluster-state=existing",
		"--client-cert-auth", "--peer-client-cert-auth",
		"--trusted-ca-file=/etc/stratum/pki/etcd/ca.crt",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("etcd args lack %s: %v", want, args)
		}
	}
	st := joinedState()
	st.Etcd.InitialCluster = ""
	if _, err := EtcdArgs(st); err == nil {
		t.Fatal("a node state without an initial cluster rendered etcd flags")
	}
}

func TestAPIServerArgsFromNodeState(t *testing.T) {
	files := &host.Dir{Root: t.TempDir()}
	args, err := APIServerArgs(joinedState(), files)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"--advertise-address=198.18.0.12",
		"--bind-address=0.0.0.0", // the VIP reaches it while this node holds it
		"--etcd-servers=https://198.18.0.12:2379",
		"--service-cluster-ip-range=10.96.0.0/12",
		"--service-account-issuer=https://kubernetes.default.svc.example.internal",
		"--enable-bootstrap-token-auth=true",
		"--authorization-mode=Node,RBAC",
	} {
		if !slices.Contains(args, want) {
			t.Errorf("apiserver args lack %s: %v", want, args)
		}
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--encryption-provider-config") {
			t.Fatalf("encryption config flag without the file: %s", a)
		}
	}
	if err := files.WriteFile(certbundle.EncryptionConfigPath, []byte("kind: EncryptionConfiguration\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args, _ = APIServerArgs(joinedState(), files)
	if !slices.Contains(args, "--encryption-provider-config="+certbundle.EncryptionConfigPath) {
		t.Fatalf("the node's at-rest encryption config is not used: %v", args)
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--audit-") {
			t.Fatalf("an audit flag on a node without a profile: %s", a)
		}
	}
	st := joinedState()
	st.Profile = "cis"
	args, _ = APIServerArgs(st, files)
	for _, want := range []string{"--audit-policy-file=" + AuditPolicyPath, "--audit-log-path=" + AuditLogPath, "--audit-log-maxage=30"} {
		if !slices.Contains(args, want) {
			t.Errorf("a cis node's apiserver args lack %s: %v", want, args)
		}
	}
	st = joinedState()
	st.NodeIP = ""
	if _, err := APIServerArgs(st, files); err == nil {
		t.Fatal("a node state without a node IP rendered apiserver flags")
	}
}

func TestBinariesCheck(t *testing.T) {
	dir := t.TempDir()
	script := func(name, out string, mode os.FileMode) {
		os.Remove(filepath.Join(dir, name))
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho '"+out+"'\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	b := Binaries{Dir: dir}
	ctx := context.Background()
	if err := b.Check(ctx, EtcdBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "missing") || !strings.Contains(err.Error(), "make dist") {
		t.Fatalf("missing etcd: %v", err)
	}
	script(EtcdBinary, "etcd Version: 3.7.3", 0o644)
	if err := b.Check(ctx, EtcdBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "not an executable") {
		t.Fatalf("non-executable etcd: %v", err)
	}
	script(EtcdBinary, "etcd Version: 3.5.0", 0o755)
	if err := b.Check(ctx, EtcdBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "3.5.0") {
		t.Fatalf("wrong etcd version: %v", err)
	}
	script(EtcdBinary, "etcd Version: 3.7.3", 0o755)
	if err := b.Check(ctx, EtcdBinary); err != nil {
		t.Fatalf("the pinned etcd: %v", err)
	}
	script(APIServerBinary, "Kubernetes v1.37.2", 0o755)
	if err := b.Check(ctx, APIServerBinary); err != nil {
		t.Fatalf("the pinned apiserver: %v", err)
	}
}

func TestPortsFreeNamesTheBusyPort(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := PortsFree([]int{port}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("busy port: %v", err)
	}
}

func TestReadyzAnswerNamesTheFailingChecks(t *testing.T) {
	answer := func(code int, body string) *http.Response {
		return &http.Response{StatusCode: code, Status: fmt.Sprintf("%d %s", code, http.StatusText(code)), Body: io.NopCloser(strings.NewReader(body))}
	}
	if err := ReadyzAnswer(answer(200, "ok")); err != nil {
		t.Fatalf("200: %v", err)
	}
	// A failing /readyz as kube-apiserver writes it.
	failing := "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]etcd-readiness ok\n" +
		"[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n[+]shutdown ok\nreadyz check failed\n"
	err := ReadyzAnswer(answer(500, failing))
	if err == nil || err.Error() != "status 500 Internal Server Error, failing checks: etcd, poststarthook/rbac/bootstrap-roles" {
		t.Fatalf("failing readyz: %v", err)
	}
	if err := ReadyzAnswer(answer(503, "")); err == nil || err.Error() != "status 503 Service Unavailable" {
		t.Fatalf("503 without a body: %v", err)
	}
}
