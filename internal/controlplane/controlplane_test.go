package controlplane

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"stratum.dev/stratum/internal/certbundle"
	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/nodestate"
	pkiutil "stratum.dev/stratum/internal/pki"
	"stratum.dev/stratum/internal/version"
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
	mustDo(t, os.Chmod(dir, 0o755)) // whatever the umask made it
	script := func(name, out string, mode os.FileMode) {
		os.Remove(filepath.Join(dir, name))
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho '"+out+"'\n"), mode); err != nil {
			t.Fatal(err)
		}
		mustDo(t, os.Chmod(filepath.Join(dir, name), mode)) // whatever the umask made it
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
	if err := b.Check(ctx, EtcdBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "3.5.0") || !strings.Contains(err.Error(), `"etcd Version: 3.7.3" or "etcd Version: 3.6.16"`) {
		t.Fatalf("wrong etcd version: %v", err)
	}
	script(EtcdBinary, "etcd Version: 3.7.3", 0o755)
	if v, err := b.Version(ctx, EtcdBinary); err != nil || v != version.Etcd {
		t.Fatalf("the pinned etcd: %q %v", v, err)
	}
	// A member downgraded by `stratum etcd downgrade` runs the previous
	// minor: its binary is accepted, and said to be that version.
	script(EtcdBinary, "etcd Version: 3.6.16", 0o755)
	if v, err := b.Version(ctx, EtcdBinary); err != nil || v != version.EtcdPrevious {
		t.Fatalf("the previous etcd (a downgrade's): %q %v", v, err)
	}
	// A version whose text begins with the pinned one's is another version.
	script(EtcdBinary, "etcd Version: 3.7.30", 0o755)
	if err := b.Check(ctx, EtcdBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "3.7.30") {
		t.Fatalf("etcd 3.7.30 against the pinned 3.7.3: %v, want it refused", err)
	}
	script(APIServerBinary, "Kubernetes v1.37.20", 0o755)
	if err := b.Check(ctx, APIServerBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), "v1.37.20") {
		t.Fatalf("kube-apiserver v1.37.20 against the pinned v1.37.2: %v, want it refused", err)
	}
	script(EtcdBinary, "etcd Version: 3.7.3", 0o755)
	script(APIServerBinary, "Kubernetes v1.37.2", 0o755)
	if err := b.Check(ctx, APIServerBinary); err != nil {
		t.Fatalf("the pinned apiserver: %v", err)
	}

	// Run by root, a binary another user could change or replace is
	// refused before it is run: writable by its group, owned by another
	// user, in a directory others may write (unless sticky) or below one
	// another user owns, or reached by a link from such a directory. Not
	// root, nothing is judged.
	etcd := b.Path(EtcdBinary)
	if os.Geteuid() != 0 {
		mustDo(t, os.Chmod(etcd, 0o775))
		if err := b.Check(ctx, EtcdBinary); err != nil {
			t.Fatalf("a group-writable etcd, not run by root: %v", err)
		}
		return
	}
	refused := func(what, want string) {
		t.Helper()
		if err := b.Check(ctx, EtcdBinary); !errors.Is(err, ErrBinary) || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want ErrBinary naming %q", what, err, want)
		}
	}
	mustDo(t, os.Chmod(etcd, 0o775))
	refused("a group-writable etcd", "is writable by its group or others (mode -rwxrwxr-x)")
	mustDo(t, os.Chmod(etcd, 0o755))
	mustDo(t, os.Chown(etcd, 1000, 1000))
	refused("an etcd of uid 1000", "the file "+etcd+" belongs to uid 1000")
	mustDo(t, os.Chown(etcd, 0, 0))
	mustDo(t, os.Chmod(dir, 0o777))
	refused("an etcd in a world-writable directory", "the directory "+dir+" is writable")
	mustDo(t, os.Chmod(dir, 0o777|fs.ModeSticky))
	if err := b.Check(ctx, EtcdBinary); err != nil {
		t.Fatalf("an etcd in a sticky world-writable directory (its file root's alone): %v", err)
	}
	mustDo(t, os.Chmod(dir, 0o755))
	mustDo(t, os.Chown(filepath.Dir(dir), 1000, 1000))
	refused("an etcd below a directory of uid 1000", "the directory "+filepath.Dir(dir)+" belongs to uid 1000")
	mustDo(t, os.Chown(filepath.Dir(dir), 0, 0))
	linked := t.TempDir()
	mustDo(t, os.Chmod(linked, 0o755))
	mustDo(t, os.Symlink(etcd, filepath.Join(linked, EtcdBinary)))
	mustDo(t, os.Chmod(linked, 0o777))
	b = Binaries{Dir: linked}
	refused("a link to etcd in a world-writable directory", "the directory "+linked+" is writable")
	mustDo(t, os.Chmod(linked, 0o755))
	if err := b.Check(ctx, EtcdBinary); err != nil {
		t.Fatalf("a link to the pinned etcd, both root's: %v", err)
	}
	// A chain of links whose middle hop is in a directory others may
	// write: neither the path as given nor the one it resolves to passes
	// through it, and it is refused all the same.
	hop := t.TempDir()
	mustDo(t, os.Chmod(hop, 0o755))
	mustDo(t, os.Symlink(etcd, filepath.Join(hop, "etcd-hop")))
	mustDo(t, os.Remove(filepath.Join(linked, EtcdBinary)))
	mustDo(t, os.Symlink(filepath.Join(hop, "etcd-hop"), filepath.Join(linked, EtcdBinary)))
	if err := b.Check(ctx, EtcdBinary); err != nil {
		t.Fatalf("a chain of links to the pinned etcd, all root's: %v", err)
	}
	mustDo(t, os.Chmod(hop, 0o777))
	refused("a chain of links whose middle hop is in a world-writable directory", "the directory "+hop+" is writable")
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
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

// TestWaitReadyzFollowsTheAnswers: the wait ends at the first 200, trusting
// only the given CA; it ends early when the watched process exits, names the
// last failing checks, and refuses a CA that holds no certificate.
func TestWaitReadyzFollowsTheAnswers(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprint(w, "[+]ping ok\n[-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n")
			return
		}
		fmt.Fprint(w, "ok")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted client's handshakes
	srv.StartTLS()
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := WaitReadyz(ctx, srv.URL+"/readyz", caPEM, time.Millisecond, nil); err != nil {
		t.Fatalf("ready on the third answer: %v", err)
	}
	if n := asked.Load(); n != 3 {
		t.Fatalf("asked %d times, want 3", n)
	}

	asked.Store(-1 << 20) // failing from now on
	exited := make(chan struct{})
	close(exited)
	err := WaitReadyz(ctx, srv.URL+"/readyz", caPEM, time.Hour, exited)
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") || !strings.Contains(err.Error(), "poststarthook/rbac/bootstrap-roles") {
		t.Fatalf("an exited process: %v", err)
	}
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if err := WaitReadyz(short, srv.URL+"/readyz", caPEM, time.Millisecond, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("never ready: %v", err)
	}

	// Another CA: the server's certificate is not trusted, never ready.
	other, err := pkiutil.NewCA("another cluster", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherPEM := other.CertPEM
	asked.Store(10)                                                 // answering 200 now
	short2, cancelShort2 := context.WithTimeout(ctx, 2*time.Second) // never ready: a handshake's time on a busy machine
	defer cancelShort2()
	var unknownAuthority x509.UnknownAuthorityError
	if err := WaitReadyz(short2, srv.URL+"/readyz", otherPEM, 50*time.Millisecond, nil); !errors.As(err, &unknownAuthority) {
		t.Fatalf("an untrusted server: %v", err)
	}
	if err := WaitReadyz(ctx, srv.URL+"/readyz", []byte("not PEM"), time.Millisecond, nil); !errors.Is(err, ErrNoCACertificate) {
		t.Fatalf("no CA certificate: %v", err)
	}
}
