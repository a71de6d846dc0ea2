// Package assets finds the real binaries (kube-apiserver,
// kube-controller-manager, etcd) that tests, the simulator and envtest run,
// and the etcdctl and kubectl clients end-to-end tests drive them with. It is
// the one place in the code that knows where they are.
//
// `make assets` builds them from Go modules pinned in tools/ (see
// docs/assets.md) into a cache directory named by a key over those pins, so a
// version bump builds into a fresh directory and never mixes with the old
// binaries. The directory is
//
//	$STRATUM_ASSETS_DIR/<key>            if STRATUM_ASSETS_DIR is set
//	<os.UserCacheDir()>/stratum/assets/<key>  otherwise
//
// where <key> is the first 16 hex digits of a SHA-256 over
// tools/versions.mk and every tools/*/go.sum. The repository root is the
// first directory holding tools/versions.mk, walking up from the working
// directory and then from the executable's directory, so `go test` in any
// package and bin/stratum both find it.
package assets

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"stratum.dev/stratum/internal/version"
)

// EnvDir names the environment variable that overrides the cache base
// directory. The key is still appended, so one base serves every pin set.
const EnvDir = "STRATUM_ASSETS_DIR"

// VersionsFile is the pin file, relative to the repository root; finding it is
// how the repository root is recognised.
const VersionsFile = "tools/versions.mk"

// Binary names inside the cache directory, as tools/build-assets.sh writes them.
const (
	KubeAPIServerName         = "kube-apiserver"
	KubeControllerManagerName = "kube-controller-manager"
	// EtcdctlName is the etcd client at version.Etcd.
	EtcdctlName = "etcdctl"
	// KubectlName is the Kubernetes client at version.Kubernetes.
	KubectlName = "kubectl"
)

// EtcdName is the binary name of the etcd server at version v ("v3.7.3" ->
// "etcd-v3.7.3"). The versions built are version.Etcd and version.EtcdPrevious.
func EtcdName(v string) string { return "etcd-" + v }

// Names lists every binary `make assets` builds for the pins in internal/version.
func Names() []string {
	return []string{
		KubeAPIServerName,
		KubeControllerManagerName,
		EtcdName(version.Etcd),
		EtcdName(version.EtcdPrevious),
		EtcdctlName,
		KubectlName,
	}
}

// ErrMissing is matched (errors.Is) by the error for a binary that is not in
// the cache directory. The remedy is always `make assets`.
var ErrMissing = errors.New("asset binary missing")

// ErrNoRoot is matched by the error when no repository root (a directory
// holding tools/versions.mk) is found above the working directory or the
// executable, so the pins, and with them the cache key, are unknown.
var ErrNoRoot = errors.New("stratum repository root not found")

// Root returns the repository root: the first directory holding
// tools/versions.mk walking up from the working directory, then from the
// executable's directory.
func Root() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		if d := filepath.Dir(exe); !slices.Contains(starts, d) {
			starts = append(starts, d)
		}
	}
	return findRoot(starts...)
}

// findRoot walks up from each start in turn and returns the first directory
// holding VersionsFile.
func findRoot(starts ...string) (string, error) {
	for _, start := range starts {
		dir, err := filepath.Abs(start)
		if err != nil {
			continue
		}
		for {
			if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(VersionsFile))); err == nil && fi.Mode().IsRegular() {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("%w: no %s above %s; run from inside the stratum checkout (nothing was built or read)",
		ErrNoRoot, VersionsFile, strings.Join(starts, " or "))
}

// Key returns the cache key for the pins in the repository at root: the first
// 16 hex digits of a SHA-256 over tools/versions.mk and, for each
// tools/*/go.sum in sorted order, its slash-separated path relative to root
// and its content. Every input is framed by its name and length, so no two
// different sets of inputs hash alike. Changing a pin, regenerating a tools
// module, or adding or removing one changes the key.
func Key(root string) (string, error) {
	inputs := []string{VersionsFile}
	sums, err := filepath.Glob(filepath.Join(root, "tools", "*", "go.sum"))
	if err != nil {
		return "", fmt.Errorf("listing tools/*/go.sum under %s: %w", root, err)
	}
	for _, s := range sums {
		rel, err := filepath.Rel(root, s)
		if err != nil {
			return "", fmt.Errorf("naming %s relative to %s: %w", s, root, err)
		}
		inputs = append(inputs, filepath.ToSlash(rel))
	}
	sort.Strings(inputs[1:])

	h := sha256.New()
	for _, name := range inputs {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return "", fmt.Errorf("reading asset pin %s: %w (run `make tools-mod` if a tools module is incomplete)", name, err)
		}
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(strconv.Itoa(len(data))))
		h.Write([]byte{0})
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// Base returns the directory that holds one cache directory per key:
// $STRATUM_ASSETS_DIR if set, else os.UserCacheDir()/stratum/assets.
func Base() (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return filepath.Abs(d)
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("locating the asset cache: %w (set %s to a directory)", err, EnvDir)
	}
	return filepath.Join(c, "stratum", "assets"), nil
}

// Dir returns the cache directory for the current pins: Base()/Key(Root()).
// The directory need not exist; `make assets` creates and fills it.
func Dir() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return DirFor(root)
}

// DirFor is Dir for the repository at root.
func DirFor(root string) (string, error) {
	base, err := Base()
	if err != nil {
		return "", err
	}
	key, err := Key(root)
	if err != nil {
		return "", err
	}
	return filepath.Join(base, key), nil
}

// Path returns the absolute path of the named binary in Dir(). A binary that
// is absent or not an executable regular file is an error matching
// ErrMissing that names the path and says to run `make assets`.
func Path(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("asset name %q is not a plain binary name like %q", name, KubeAPIServerName)
	}
	dir, err := Dir()
	if err != nil {
		return "", err
	}
	return check(filepath.Join(dir, name))
}

// check returns p if it is an executable regular file, else an ErrMissing error.
func check(p string) (string, error) {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", missing(p, "does not exist")
	case err != nil:
		return "", fmt.Errorf("%w: %s: %v; run `make assets` to build it", ErrMissing, p, err)
	case !fi.Mode().IsRegular():
		return "", missing(p, "is not a regular file")
	case fi.Mode().Perm()&0o111 == 0:
		return "", missing(p, "is not executable")
	}
	return p, nil
}

func missing(p, why string) error {
	return fmt.Errorf("%w: %s %s; run `make assets` in the repository root to build the pinned binaries", ErrMissing, p, why)
}

// KubeAPIServer returns the path of the pinned kube-apiserver.
func KubeAPIServer() (string, error) { return Path(KubeAPIServerName) }

// KubeControllerManager returns the path of the pinned kube-controller-manager.
func KubeControllerManager() (string, error) { return Path(KubeControllerManagerName) }

// Etcd returns the path of the etcd server binary at version v, which must be
// one `make assets` builds: version.Etcd or version.EtcdPrevious.
func Etcd(v string) (string, error) { return Path(EtcdName(v)) }

// Etcdctl returns the path of the etcdctl client at version.Etcd.
func Etcdctl() (string, error) { return Path(EtcdctlName) }

// Kubectl returns the path of the kubectl client at version.Kubernetes.
func Kubectl() (string, error) { return Path(KubectlName) }
