package e2e

import (
	"context"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"stratum.dev/stratum/internal/version"
)

// etcdDiskLink is where linkEtcdDisk points a host's etcd data directory: a
// directory on a tmpfs mounted on /mnt in the host's mount namespace, out of
// the directories a reset empties.
const etcdDiskLink = "/mnt/etcd"

// mountEtcdDisk mounts a tmpfs on h's etcd data directory, in h's mount
// namespace, holding a lost+found as a freshly made ext4 file system does:
// the dedicated etcd disk etcd's tuning guide advises. Nothing can remove or
// rename the directory while it is mounted.
func mountEtcdDisk(ctx context.Context, t *testing.T, h *host) {
	t.Helper()
	for _, args := range [][]string{
		{"mkdir", "-p", "-m", "0700", version.EtcdDataDir},
		{"mount", "-t", "tmpfs", "-o", "size=2g,mode=0700", "etcd-disk", version.EtcdDataDir},
		{"mkdir", "-m", "0700", version.EtcdDataDir + "/lost+found"},
	} {
		if _, e, err := h.Run(ctx, args...); err != nil {
			t.Fatalf("%s on %s: %v: %s", strings.Join(args, " "), h.Name(), err, e)
		}
	}
}

// linkEtcdDisk makes h's etcd data directory a symbolic link to a directory
// on a disk mounted elsewhere (etcdDiskLink).
func linkEtcdDisk(ctx context.Context, t *testing.T, h *host) {
	t.Helper()
	for _, args := range [][]string{
		{"mount", "-t", "tmpfs", "-o", "size=2g,mode=0755", "etcd-disk", path.Dir(etcdDiskLink)},
		{"mkdir", "-m", "0700", etcdDiskLink},
		{"mkdir", "-p", "-m", "0700", path.Dir(version.EtcdDataDir)},
		{"ln", "-s", etcdDiskLink, version.EtcdDataDir},
	} {
		if _, e, err := h.Run(ctx, args...); err != nil {
			t.Fatalf("%s on %s: %v: %s", strings.Join(args, " "), h.Name(), err, e)
		}
	}
}

// checkEtcdDisk fails t unless h's etcd data directory is still what
// mountEtcdDisk (mounted) or linkEtcdDisk made it, and holds etcd's member
// directory (holdsData) or nothing but the disk's own lost+found: a reset, a
// rejoin or a restore replaces the data and keeps the disk.
func checkEtcdDisk(ctx context.Context, t *testing.T, h *host, mounted, holdsData bool) {
	t.Helper()
	want := []string{}
	if mounted {
		want = append(want, "lost+found")
		if _, e, err := h.Run(ctx, "mountpoint", "-q", version.EtcdDataDir); err != nil {
			t.Fatalf("%s's etcd disk is no longer mounted on %s: %v %s", h.Name(), version.EtcdDataDir, err, e)
		}
	} else {
		if target, err := os.Readlink(h.MachinePath(version.EtcdDataDir)); err != nil || target != etcdDiskLink {
			t.Fatalf("%s's etcd data directory is no longer the link to %s: %q, %v", h.Name(), etcdDiskLink, target, err)
		}
	}
	if holdsData {
		want = append(want, "member")
	}
	slices.Sort(want)
	o, e, err := h.Run(ctx, "ls", "-A", version.EtcdDataDir+"/")
	if err != nil {
		t.Fatalf("ls %s on %s: %v: %s", version.EtcdDataDir, h.Name(), err, e)
	}
	if got := strings.Fields(o); !slices.Equal(got, want) {
		t.Fatalf("%s's etcd disk (%s) holds %v, want %v", h.Name(), version.EtcdDataDir, got, want)
	}
}
