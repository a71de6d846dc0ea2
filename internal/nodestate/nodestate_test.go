package nodestate

import (
	"errors"
	"reflect"
	"slices"
	"strings"
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

// formatFields are the JSON fields of each node state format version,
// nested ones as parent.child. A field added to NodeState without a new
// CurrentVersion (and its list here) fails TestFormatVersionFollowsTheFields.
var formatFields = map[int][]string{
	1: {
		"cilium", "clusterDomain",
		"etcd", "etcd.clientURL", "etcd.clusterID", "etcd.initialCluster", "etcd.initialClusterState",
		"etcd.memberID", "etcd.name", "etcd.peerURL",
		"nodeIP", "nodeName", "podCIDR", "profile", "role", "server", "serviceCIDR", "version",
		"vip", "vip.address", "vip.interface",
	},
	2: {
		"cilium", "clusterDomain",
		"etcd", "etcd.clientURL", "etcd.clusterID", "etcd.initialCluster", "etcd.initialClusterState",
		"etcd.memberID", "etcd.name", "etcd.peerURL", "etcd.quotaBackendBytes", "etcd.started",
		"nodeIP", "nodeName", "podCIDR", "profile", "role", "server", "serviceCIDR", "version",
		"vip", "vip.address", "vip.interface",
	},
}

// jsonFields lists t's JSON field names, recursing into struct fields of
// this package (the cilium settings are the addons package's, versioned with
// it).
func jsonFields(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, prefix+name)
		if f.Type.Kind() == reflect.Struct && f.Type.PkgPath() == t.PkgPath() {
			out = append(out, jsonFields(f.Type, prefix+name+".")...)
		}
	}
	return out
}

// TestFormatVersionFollowsTheFields: the fields of NodeState are the ones
// recorded for CurrentVersion, every version from 1 is recorded, and each
// differs from the one before. A new field is a new version: an older
// stratum must refuse the file rather than ignore the field and drop it at
// its next save (CurrentVersion says why). What it cannot tell is a field
// written into the current version's record in place; the record of each
// released version is not to be edited.
func TestFormatVersionFollowsTheFields(t *testing.T) {
	got := jsonFields(reflect.TypeFor[NodeState](), "")
	slices.Sort(got)
	want, ok := formatFields[CurrentVersion]
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("NodeState's fields are %q, format version %d records %q: a field added or removed needs CurrentVersion raised (an older stratum then refuses the file instead of dropping the field) and formatFields[%d] recorded", got, CurrentVersion, want, CurrentVersion+1)
	}
	if len(formatFields) != CurrentVersion {
		t.Fatalf("formatFields records %d versions, want 1 to %d", len(formatFields), CurrentVersion)
	}
	for v := 2; v <= CurrentVersion; v++ {
		if slices.Equal(formatFields[v], formatFields[v-1]) {
			t.Errorf("format version %d records the same fields as %d: a version is raised for a change of fields", v, v-1)
		}
	}
}

// TestLoadReadsEveryOlderFormat: a node state saved by a stratum of format
// version 1 (no etcd.started or quota) is read, and saved as the current
// version.
func TestLoadReadsEveryOlderFormat(t *testing.T) {
	h := &host.Dir{Root: t.TempDir()}
	v1 := `{"version": 1, "role": "control-plane", "nodeName": "cp1", "nodeIP": "127.0.0.11", "server": "https://127.0.0.11:6443", "vip": {},
 "etcd": {"name": "cp1", "peerURL": "https://127.0.0.11:2380", "clientURL": "https://127.0.0.11:2379", "initialCluster": "cp1=https://127.0.0.11:2380", "initialClusterState": "new"}}`
	if err := h.WriteFile(Path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Load(h)
	if err != nil {
		t.Fatalf("Load of a version 1 node state: %v", err)
	}
	if st.NodeName != "cp1" || st.Etcd.PeerURL != "https://127.0.0.11:2380" || st.Etcd.Started {
		t.Fatalf("version 1 node state read as %+v", st)
	}
	if err := Save(h, st); err != nil {
		t.Fatal(err)
	}
	if again, err := Load(h); err != nil || again.Version != CurrentVersion {
		t.Fatalf("saved again: version %v, %v; want %d", again, err, CurrentVersion)
	}
}
