package ha

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCheckJoinOptionsToken: the join's check of --token is the token
// package's (k8s.io/cluster-bootstrap's), with the join's own words.
func TestCheckJoinOptionsToken(t *testing.T) {
	o := JoinOptions{
		Server:  "https://10.0.0.10:6443",
		CAHash:  "sha256:" + strings.Repeat("ab", 32),
		CertKey: strings.Repeat("cd", 32),
	}
	for tok, ok := range map[string]bool{
		"abcdef.0123456789abcdef":        true,
		"ABCDEF.0123456789abcdef":        false,
		"abcdef.0123456789abcdeF":        false,
		"abcdef.0123456789abcdef\n":      false,
		"abcdef.0123456789abcde":         false,
		"abcdef.0123456789abcdef.abcdef": false,
		"":                               false,
	} {
		o.Token = tok
		err := CheckJoinOptions(o)
		if ok && err != nil {
			t.Errorf("token %q refused: %v", tok, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "--token is not <6 lowercase alphanumerics>.<16 lowercase alphanumerics>")) {
			t.Errorf("token %q: %v, want the --token refusal", tok, err)
		}
	}
}

// TestCheckJoinOptionsProfile: the joiner's own profile (its --config) is
// checked with the other options, before the download, as the bring-up
// checks it: an unknown one, or cis with SELinux opted out, is refused.
func TestCheckJoinOptionsProfile(t *testing.T) {
	o := JoinOptions{
		Server:  "https://10.0.0.10:6443",
		Token:   "abcdef.0123456789abcdef",
		CAHash:  "sha256:" + strings.Repeat("ab", 32),
		CertKey: strings.Repeat("cd", 32),
	}
	for _, tc := range []struct {
		profile string
		optOut  bool
		want    string // "" for accepted
	}{
		{"", false, ""},
		{"", true, ""},
		{"cis", false, ""},
		{"cis", true, "the cis profile requires SELinux"},
		{"bogus", false, `unknown profile "bogus"`},
	} {
		o.Profile, o.SELinuxOptOut = tc.profile, tc.optOut
		err := CheckJoinOptions(o)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was changed")) {
			t.Errorf("profile %q, SELinux opted out %v: %v, want %q", tc.profile, tc.optOut, err, tc.want)
		}
	}
}

// TestTakeJoinFenceRefusesMalformedID: a token ID not of the bootstrap form
// is refused before any client is used (a nil one here).
func TestTakeJoinFenceRefusesMalformedID(t *testing.T) {
	n, _ := newDirNode(t)
	for _, id := range []string{"ABCDEF", "abcde", "abcdefg", "abc.de", ""} {
		if _, err := n.TakeJoinFence(context.Background(), nil, id, time.Minute); err == nil || !strings.Contains(err.Error(), "is not 6 [a-z0-9]") {
			t.Errorf("TakeJoinFence(%q) = %v, want the ID refused", id, err)
		}
	}
}
