package nodestate

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"stratum.dev/stratum/internal/host"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	h := &host.Dir{Root: t.TempDir()}
	want := &NodeState{
		Role: RoleControlPlane, NodeName: "cp1", NodeIP: "127.0.0.11",
		Server: "https://127.0.0.10:6443", VIP: VIP{Address: "127.0.0.10"},
		Etcd: Etcd{Name: "cp1", PeerURL: "https://127.0.0.11:2380", ClientURL: "https://127.0.0.11:2379",
			InitialCluster: "cp1=https://127.0.0.11:2380", InitialClusterState: "new"},
	}
	if err := Save(h, want); err != nil {
		t.Fatal(err)
	}
	got, err := Load(h)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestLoadMissingIsErrNoState(t *testing.T) {
	_, err := Load(&host.Dir{Root: t.TempDir()})
	if !errors.Is(err, ErrNoState) {
		t.Fatalf("Load on an empty host = %v, want ErrNoState", err)
	}
}

func TestLoadMalformedIsNotAbsent(t *testing.T) {
	h := &host.Dir{Root: t.TempDir()}
	if err := h.WriteFile(Path, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(h)
	if err == nil || errors.Is(err, ErrNoState) {
		t.Fatalf("Load of a malformed file = %v, want an error that is not ErrNoState", err)
	}
}

func TestLoadRefusesNewerFormat(t *testing.T) {
	h := &host.Dir{Root: t.TempDir()}
	if err := h.WriteFile(Path, []byte(`{"version": 99, "nodeName": "x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(h); err == nil {
		t.Fatal("Load accepted a newer format version")
	}
}

func TestSaveRefusesNamelessState(t *testing.T) {
	h := &host.Dir{Root: t.TempDir()}
	if err := Save(h, &NodeState{}); err == nil {
		t.Fatal("Save accepted a state with no node name")
	}
	if _, err := h.ReadFile(Path); err == nil {
		t.Fatal("a refused Save wrote the file")
	}
}
