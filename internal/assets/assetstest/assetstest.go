// Package assetstest is the test-side companion of internal/assets: Require
// hands a test the asset directory, or stops the test when a binary is
// missing. It lives apart so the production package does not import testing.
package assetstest

import (
	"errors"
	"os"
	"testing"

	"stratum.dev/stratum/internal/assets"
)

// Require returns the asset cache directory after checking that each named
// binary (assets.KubeAPIServerName, assets.EtcdName(version.Etcd), ...) is in
// it; with no names it checks every binary in assets.Names().
//
// A missing binary skips the test with the `make assets` message, except
// under CI (CI=true), where it fails the test: in CI a skipped real-server
// test would hide that nothing was tested. Any other error (no repository
// root, unreadable pins) always fails the test.
func Require(t testing.TB, names ...string) string {
	t.Helper()
	if len(names) == 0 {
		names = assets.Names()
	}
	dir, err := assets.Dir()
	if err != nil {
		t.Fatalf("locating test binaries: %v", err)
		return ""
	}
	for _, n := range names {
		if _, err := assets.Path(n); err != nil {
			if errors.Is(err, assets.ErrMissing) && os.Getenv("CI") != "true" {
				t.Skipf("skipping: %v", err)
			} else {
				t.Fatalf("test binary unavailable: %v", err)
			}
			return ""
		}
	}
	return dir
}
