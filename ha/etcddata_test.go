package ha

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"stratum.dev/stratum/internal/host"
	"stratum.dev/stratum/internal/version"
)

// etcdDataFixture fills dir with what an etcd member's data directory holds.
func etcdDataFixture(t *testing.T, dir string) {
	t.Helper()
	for _, f := range []string{"member/snap/db", "member/wal/0000000000000000-0000000000000000.wal"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("etcd data"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// names lists dir's entries' names.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// TestWipeEtcdDataKeepsALinkAndALostFound: the data directory as a link to
// a disk's directory stays a link, its target emptied (removing the link
// left every Secret on the disk); a lost+found is not data and stays; a plain
// directory goes. Each wipe is idempotent.
func TestWipeEtcdDataKeepsALinkAndALostFound(t *testing.T) {
	t.Run("link", func(t *testing.T) {
		files := &host.Dir{Root: t.TempDir()}
		data := files.Path(version.EtcdDataDir)
		disk := files.Path(version.StateDir + "/disk/etcd")
		etcdDataFixture(t, disk)
		if err := os.MkdirAll(filepath.Join(disk, lostFound), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("disk/etcd", data); err != nil {
			t.Fatal(err)
		}
		if held, err := etcdDataEntries(files); err != nil || len(held) != 1 || held[0].Name() != "member" {
			t.Fatalf("etcdDataEntries through the link = %v, %v; want member alone", held, err)
		}
		for range 2 {
			if err := wipeEtcdData(files); err != nil {
				t.Fatalf("wipe through a link: %v", err)
			}
			if fi, err := os.Lstat(data); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Fatalf("the data directory's link after the wipe: %v, %v; want it kept", fi, err)
			}
			if got := names(t, disk); !slices.Equal(got, []string{lostFound}) {
				t.Fatalf("the link's target after the wipe holds %v, want only %s", got, lostFound)
			}
			if held, err := etcdDataEntries(files); err != nil || len(held) != 0 {
				t.Fatalf("etcdDataEntries after the wipe = %v, %v; want none", held, err)
			}
		}
	})
	t.Run("plain directory", func(t *testing.T) {
		files := &host.Dir{Root: t.TempDir()}
		data := files.Path(version.EtcdDataDir)
		etcdDataFixture(t, data)
		for range 2 {
			if err := wipeEtcdData(files); err != nil {
				t.Fatalf("wipe: %v", err)
			}
			if _, err := os.Lstat(data); !os.IsNotExist(err) {
				t.Fatalf("a plain data directory after the wipe: %v; want it gone", err)
			}
		}
	})
	// A write probe a crashed join left (checkWritable's) is not data, yet
	// a wipe removes it with the rest: the plain directory goes.
	t.Run("plain directory with a write probe", func(t *testing.T) {
		files := &host.Dir{Root: t.TempDir()}
		data := files.Path(version.EtcdDataDir)
		etcdDataFixture(t, data)
		if err := os.WriteFile(filepath.Join(data, writeProbe), []byte("ok"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := wipeEtcdData(files); err != nil {
			t.Fatalf("wipe: %v", err)
		}
		if _, err := os.Lstat(data); !os.IsNotExist(err) {
			t.Fatalf("a plain data directory with a write probe after the wipe: %v; want it gone", err)
		}
	})
	t.Run("a write probe's leftovers alone", func(t *testing.T) {
		// The probe, and the temporary file of its atomic write a crash
		// left (host.Dir.WriteFile's ".<name>.tmp-<n>"): no etcd data,
		// so no "this machine was an etcd member before".
		files := &host.Dir{Root: t.TempDir()}
		data := files.Path(version.EtcdDataDir)
		if err := os.MkdirAll(data, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{writeProbe, "." + writeProbe + ".tmp-2918273645"} {
			if err := os.WriteFile(filepath.Join(data, name), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if held, err := etcdDataEntries(files); err != nil || len(held) != 0 {
			t.Fatalf("etcdDataEntries of a write probe's leftovers = %v, %v; want none", held, err)
		}
	})
	t.Run("lost+found alone", func(t *testing.T) {
		files := &host.Dir{Root: t.TempDir()}
		data := files.Path(version.EtcdDataDir)
		if err := os.MkdirAll(filepath.Join(data, lostFound), 0o700); err != nil {
			t.Fatal(err)
		}
		if held, err := etcdDataEntries(files); err != nil || len(held) != 0 {
			t.Fatalf("etcdDataEntries of a lost+found alone = %v, %v; want none (a fresh disk holds no data)", held, err)
		}
		if err := wipeEtcdData(files); err != nil {
			t.Fatalf("wipe: %v", err)
		}
		if got := names(t, data); !slices.Equal(got, []string{lostFound}) {
			t.Fatalf("the data directory after the wipe holds %v, want its %s", got, lostFound)
		}
	})
}

// TestWipeEtcdDataKeepsAMountPoint: a dedicated disk mounted on the data
// directory (a tmpfs here, in a mount namespace of the test's own thread) is
// emptied and stays mounted, where removing the whole path failed with EBUSY
// on every run of a reset, a rejoin or a restore.
func TestWipeEtcdDataKeepsAMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a mount namespace needs root (running as uid %d)", os.Geteuid())
		}
		t.Skipf("skipping: a mount namespace needs root (running as uid %d)", os.Geteuid())
	}
	// Never unlocked: the thread, and its mount namespace, end with the test.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		t.Fatalf("unshare the mount namespace: %v", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatalf("make the mounts private: %v", err)
	}
	files := &host.Dir{Root: t.TempDir()}
	data := files.Path(version.EtcdDataDir)
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=16m,mode=0700"); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", data, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(data, unix.MNT_DETACH) })
	etcdDataFixture(t, data)
	if err := os.Mkdir(filepath.Join(data, lostFound), 0o700); err != nil {
		t.Fatal(err)
	}
	mounted := func() bool {
		var in, parent unix.Stat_t
		if unix.Stat(data, &in) != nil || unix.Stat(filepath.Dir(data), &parent) != nil {
			return false
		}
		return in.Dev != parent.Dev
	}
	for range 2 {
		if err := wipeEtcdData(files); err != nil {
			t.Fatalf("wipe of a mount point: %v", err)
		}
		if !mounted() {
			t.Fatal("the disk mounted on the data directory is no longer mounted after the wipe")
		}
		if got := names(t, data); !slices.Equal(got, []string{lostFound}) {
			t.Fatalf("the mounted data directory after the wipe holds %v, want only %s", got, lostFound)
		}
	}
}
