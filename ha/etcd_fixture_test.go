package ha_test

import (
	"bytes"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"stratum.dev/stratum/ha"
)

// TestJoinBundleEtcdKeyInApiserverDatabase opens the committed database the
// pinned kube-apiserver and etcd wrote with a stratum-certs Secret
// (fixtures/etcd-join-bundle.db, remade by `make fixtures`) with the etcd this
// repository ships, and finds the Secret at JoinBundleEtcdKey: a change of
// the apiserver's storage layout that would make the key name nothing fails
// here.
func TestJoinBundleEtcdKeyInApiserverDatabase(t *testing.T) {
	dir := t.TempDir()
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:        filepath.Join("..", "fixtures", "etcd-join-bundle.db"),
		Name:                "fixture",
		OutputDataDir:       filepath.Join(dir, "etcd"),
		PeerURLs:            []string{"http://127.0.0.1:2380"},
		InitialCluster:      "fixture=http://127.0.0.1:2380",
		InitialClusterToken: "fixture",
	})
	if err != nil {
		t.Fatalf("restore the fixture snapshot: %v", err)
	}
	db, err := bolt.Open(filepath.Join(dir, "etcd", "member", "snap", "db"), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var keys int
	var found *mvccpb.KeyValue
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			t.Fatal("restored database has no key bucket")
		}
		return b.ForEach(func(_, v []byte) error {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return err
			}
			keys++
			if string(kv.Key) == ha.JoinBundleEtcdKey {
				found = &kv
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys < 10 {
		t.Fatalf("the fixture holds %d keys; want a database an apiserver wrote", keys)
	}
	if found == nil {
		t.Fatalf("no key %q among the fixture's %d keys: the apiserver's storage layout and JoinBundleEtcdKey disagree", ha.JoinBundleEtcdKey, keys)
	}
	if len(found.Value) == 0 || !bytes.Contains(found.Value, []byte("stratum-certs")) && !bytes.HasPrefix(found.Value, []byte("k8s:enc:")) {
		t.Errorf("the value at %s is neither a Secret named stratum-certs nor an encrypted object: %q", ha.JoinBundleEtcdKey, found.Value[:min(len(found.Value), 80)])
	}
}
