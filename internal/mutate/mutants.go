package main

// mutants are the planted bugs `make mutate` runs: each a check of stratum's
// that a test should notice missing, with the tests meant to notice it. They
// are written against the code as it is; TestEveryMutantAppliesToTheTree
// fails when the code moves away from one. docs/faults.md ("What the
// properties catch") records what each one's failure said.
var mutants = []mutant{
	{
		Name: "prune-keeps-recently-expired",
		File: "internal/token/token.go",
		Old:  "return bootstrapsecrets.HasExpired(s, now)",
		New:  "return bootstrapsecrets.HasExpired(s, now.Add(-time.Hour))",
		Tests: [][]string{
			{"./internal/token"},
			{"./ha", "-run", "TestPruneExpiredGrants|TestCerts"},
			{"./scenarios", "-run", "TestExpiredGrant$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "rollback-removes-started-learner",
		File: "ha/membership.go",
		Old:  "x.IsLearner && !started(x) {",
		New:  "x.IsLearner {",
		Tests: [][]string{
			{"./ha", "-run", "TestUpPromotesALearnerLeftBetweenEtcdStartAndPromotion|TestJoinFailureAfterMemberAddRollsBack|TestJoinCrashAtEveryCheckpointConverges|TestJoinSignalAtEveryStepBoundary|TestMemberAdd"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "member-add-sent-after-a-held-signal",
		File: "ha/membership.go",
		Old:  "if !sent && interrupt.SignalHeld(ctx) {",
		New:  "if !sent && false && interrupt.SignalHeld(ctx) {",
		Tests: [][]string{
			{"./ha", "-run", "TestMemberAddSignalDuringItsLookupAddsNothing|TestJoinSignal"},
		},
	},
	{
		Name: "bootstrap-over-an-unfinished-join",
		File: "ha/bootstrap.go",
		Old:  "if err := refuseUnfinishedJoin(h); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinCrashAtEveryCheckpointConverges"},
			{"./cmd/stratum/cli", "-run", "TestReportsAndDryRunsChangeNothing"},
		},
	},
	{
		Name: "install-takes-a-replaceable-stratum",
		File: "cmd/stratum/cli/services.go",
		Old:  "if err := controlplane.RootOnlyWritable(self); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./e2e", "-run", "TestInstallRefusesAStratumOthersCanReplace"},
		},
	},
	{
		Name: "reset-wipe-leaves-a-wanted-service",
		File: "ha/reset.go",
		Old:  "\t\tif err := n.stopControlPlane(ctx); err != nil {\n\t\t\treturn fmt.Errorf(\"reset: %w; %s\", err, again)",
		New:  "\t\tif err := error(nil); err != nil {\n\t\t\treturn fmt.Errorf(\"reset: %w; %s\", err, again)",
		Tests: [][]string{
			{"./ha", "-run", "TestWipesStopAServiceTheSupervisorStillRestarts"},
		},
	},
	{
		Name: "rejoin-wipe-leaves-a-wanted-service",
		File: "ha/rejoin.go",
		Old:  "\t\tif err := n.stopControlPlane(ctx); err != nil {\n\t\t\treturn fmt.Errorf(\"etcd rejoin: %w; the data is untouched",
		New:  "\t\tif err := error(nil); err != nil {\n\t\t\treturn fmt.Errorf(\"etcd rejoin: %w; the data is untouched",
		Tests: [][]string{
			{"./ha", "-run", "TestWipesStopAServiceTheSupervisorStillRestarts"},
		},
	},
	{
		Name: "refused-add-exits-midway",
		File: "ha/join.go",
		Old:  "return nil, reachedAdd && !r.addRefused, release, err",
		New:  "return nil, reachedAdd, release, err",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestReplacingAControlPlanesMachine"},
		},
	},
	{
		Name: "restore-takes-a-newer-etcds-data",
		File: "ha/snapshot.go",
		Old:  "if err := checkRestoredDataFits(p.dataDir, dbPath, n.localEtcdVersion(ctx)); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestSnapshotRestoreRefusesANewerEtcdsData"},
		},
	},
	{
		Name: "restore-bumps-past-the-snapshot-only",
		File: "ha/snapshot.go",
		Old:  "bump += p.oldRevision - ss.Revision",
		New:  "bump += 0",
		Tests: [][]string{
			{"./ha", "-run", "TestSnapshotRestoreNeverMovesTheRevisionBack"},
		},
	},
	{
		Name: "restore-ignores-its-own-data",
		File: "ha/snapshot.go",
		Old:  "p.oldRevision = p.localRevision",
		New:  "p.oldRevision = 0",
		Tests: [][]string{
			{"./ha", "-run", "TestSnapshotRestoreNeverMovesTheRevisionBack"},
		},
	},
	{
		Name: "joined-kubeconfigs-target-the-join-url",
		File: "ha/join.go",
		Old:  "st.Server = apiServerURL(r.nodeIP)",
		New:  "st.Server = o.Server",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestJoinedControlPlaneOutlivesItsJoinServer"},
		},
	},
	{
		Name: "join-holds-a-signal-while-its-add-is-refused",
		File: "ha/membership.go",
		Old:  "end() // nothing was added: a signal held during the attempt stops the add now",
		New:  "_ = end",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinSignalWhileTheAddIsRefusedStopsIt"},
		},
	},
	{
		Name: "upload-probes-one-apiserver",
		File: "ha/certs.go",
		Old:  "o.apiservers = n.servingAPIServers(ctx)",
		New:  "o.apiservers = nil",
		Tests: [][]string{
			{"./ha", "-run", "TestFencePolicyEnforcedOnEveryAPIServer"},
		},
	},
	{
		Name: "bootstrap-keeps-an-interrupted-runs-partial-cas",
		File: "ha/clustercas.go",
		Old:  "interrupted := err == nil",
		New:  "interrupted := false",
		Tests: [][]string{
			{"./ha", "-run", "TestBootstrapInterruptedWritingTheCAsConverges/crash"},
		},
	},
	{
		Name: "renew-makes-new-keys",
		File: "internal/pki/node.go",
		Old:  "if key, perr := ParseKey(keyPEM); err == nil && perr == nil {",
		New:  "if key, perr := ParseKey(keyPEM); false && err == nil && perr == nil {",
		Tests: [][]string{
			{"./internal/pki", "-run", "TestRenewNodeLeavesKeepsKeys"},
			{"./cmd/stratum/cli", "-run", "TestCertsCheckAndRenew"},
		},
	},
	{
		Name: "up-starts-over-a-data-replacement",
		File: "ha/up.go",
		Old:  "if err := n.refuseDataReplaceUnderWay(\"starting this control plane\"); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestRestoreCrashRefusesUpUntilReRun"},
		},
	},
	{
		Name: "join-refusal-keeps-overwritten-files",
		File: "ha/join.go",
		Old:  "for _, p := range slices.Sorted(maps.Keys(c.overwritten)) {",
		New:  "for _, p := range slices.Sorted(maps.Keys(c.overwritten))[:0] {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusedWhileClusterUnhealthy$"},
		},
	},
	{
		Name: "reset-never-restarts-its-etcd",
		File: "ha/reset.go",
		Old:  "case o.role == \"unknown\" && o.journalUnderWay && o.journalUnreadable == nil && o.stateSaved && !o.removed && o.mayStartEtcd && !o.running[ServiceEtcd]:",
		New:  "case false:",
		Tests: [][]string{
			{"./ha", "-run", "TestResetConvergesAfterACrashAtEveryCheckpoint"},
		},
	},
	{
		Name: "cis-profile-not-audited",
		File: "internal/controlplane/controlplane.go",
		Old:  "if profile != \"cis\" {",
		New:  "if true {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestCISProfileAuditsTheAPIServer"},
		},
	},
	{
		Name: "join-ignores-published-members",
		File: "ha/certs.go",
		Old:  "withPublishedEtcdURLs(publishedEtcdURLs(s.Annotations[etcdClientURLsAnnotation]), g.EtcdEndpoints)",
		New:  "withPublishedEtcdURLs(nil, g.EtcdEndpoints)",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinFindsTheMembersPublishedAfterItsMint"},
			{"./cmd/stratum/cli", "-run", "TestResetTakesAControlPlaneOut"},
		},
	},
	{
		Name: "operator-does-not-publish-members",
		File: "ha/operator.go",
		Old:  "if _, perr := n.publishEtcdMembers(ctx, cs, members); perr != nil {",
		New:  "if perr := error(nil); perr != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinFindsTheMembersPublishedAfterItsMint"},
		},
	},
	{
		Name: "reset-ignores-quorum",
		File: "ha/reset.go",
		Old:  "case o.role == \"voter\" && o.healthyAfter < rep.QuorumAfter:",
		New:  "case o.role == \"voter\" && o.healthyAfter < 0:",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestResetTakesAControlPlaneOut"},
		},
	},
	{
		Name: "unfinished-reset-not-refused",
		File: "ha/reset.go",
		Old:  "_, err := n.env.Host.Stat(resetJournalPath)",
		New:  "_, err := n.env.Host.Stat(resetJournalPath + \".elsewhere\")",
		Tests: [][]string{
			{"./ha", "-run", "TestResetConvergesAfterACrashAtEveryCheckpoint"},
		},
	},
	{
		Name: "writefile-no-file-fsync",
		File: "internal/host/dir.go",
		Old:  "if err := tmp.Sync(); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./internal/host/..."},
			{"./ha", "-run", "TestJoinCrashLosingUnsyncedConverges|TestJoinDiskFault"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "writefile-no-dir-fsync",
		File: "internal/host/dir.go",
		Old:  "if err := fsys.SyncDir(dir); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./internal/host/..."},
			{"./ha", "-run", "TestJoinCrashLosingUnsyncedConverges|TestJoinDiskFault"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "add-takes-started-learner",
		File: "ha/membership.go",
		Old:  "if started(m) || !m.IsLearner {",
		New:  "if !m.IsLearner {",
		Tests: [][]string{
			{"./ha", "-run", "TestUpPromotesALearnerLeftBetweenEtcdStartAndPromotion|TestMemberAdd|TestJoinOnAnotherMembersAddressNeverHarmsIt|TestJoinRefusalsChangeNothing|TestJoinCrashAtEveryCheckpointConverges"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "add-takes-started-voter",
		File: "ha/membership.go",
		Old:  "if started(m) || !m.IsLearner {",
		New:  "if started(m) && m.IsLearner {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestReplacingAControlPlanesMachine"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=4", "-rapid.steps=12", "-rapid.seed=2"},
		},
	},
	{
		Name: "no-clock-skew-check",
		File: "ha/join.go",
		Old:  "if skew <= maxClockSkew && skew >= -maxClockSkew {",
		New:  "if true {",
		Tests: [][]string{
			{"./ha", "-run", "Skew|Clock|TestJoinRefusalsChangeNothing"},
			{"./scenarios", "-run", "TestExpiredGrant$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "fence-ignores-reacquire",
		File: "ha/fence.go",
		Old:  "case cur.Spec.AcquireTime == nil || !cur.Spec.AcquireTime.Time.Equal(acquired):",
		New:  "case cur.Spec.AcquireTime == nil || (false && !cur.Spec.AcquireTime.Time.Equal(acquired)):",
		Tests: [][]string{
			{"./ha", "-run", "Fence"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "fence-never-runs-out",
		File: "ha/fence.go",
		Old:  "return !now.Before(leaseEnd(l))",
		New:  "return false",
		Tests: [][]string{
			{"./ha", "-run", "Fence"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "vip-kept-after-lease-lost",
		File: "internal/vip/vip.go",
		Old:  "OnStoppedLeading: t.end,",
		New:  "OnStoppedLeading: func() {},",
		Tests: [][]string{
			{"./internal/vip"},
			{"./sim", "-run", "VIP|Vip"},
			{"./scenarios", "-run", "TestClientsThroughVIP$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "resumed-run-clears-journal",
		File: "ha/join.go",
		Old:  "\tif r.resumed {\n\t\treturn fmt.Errorf(\"control-plane join stopped before the etcd member-add",
		New:  "\tif false {\n\t\treturn fmt.Errorf(\"control-plane join stopped before the etcd member-add",
		Tests: [][]string{
			{"./ha", "-run", "TestResumedJournal|TestJoinCrashAtEveryCheckpointConverges|TestJoinSignalAtEveryStepBoundary|TestJoinIntent|TestJoinCrashLosingUnsynced"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "promote-only-via-initial-peers",
		File: "ha/up.go",
		Old:  "\t\tpeers = append(peers, own)\n",
		New:  "\t\t_ = own\n",
		Tests: [][]string{
			{"./ha", "-run", "TestUp"},
			{"./scenarios", "-run", "TestInterruptedMemberAdd$", "-rapid.checks=2", "-rapid.steps=8"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "join-ignores-bundle-vip",
		File: "ha/join.go",
		Old:  "if st.VIP.Address == \"\" && g.VIP != \"\" {",
		New:  "if false && g.VIP != \"\" {",
		Tests: [][]string{
			{"./ha", "-run", "VIP|TestJoinTwoControlPlanes|TestSingleControlPlaneGrowsIntoHA"},
			{"./scenarios", "-run", "TestClientsThroughVIP$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "covers-any-ip",
		File: "internal/pki/pki.go",
		Old:  "\t\tif have.Equal(ip) {\n\t\t\treturn nil",
		New:  "\t\tif have.Equal(ip) || true {\n\t\t\treturn nil",
		Tests: [][]string{
			{"./internal/pki"},
			{"./ha", "-run", "VIP|TestSingleControlPlaneGrowsIntoHA"},
			{"./scenarios", "-run", "TestClientsThroughVIP$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "rejoin-ignores-silent-majority",
		File: "ha/rejoin.go",
		Old:  "if len(silent) >= len(ips)/2+1 {",
		New:  "if len(silent) > len(ips) {",
		Tests: [][]string{
			{"./ha", "-run", "TestRejoinRefusedWhileOldPeersMayHoldQuorum|TestPlanRejoin"},
			{"./cmd/stratum/cli", "-run", "Rejoin"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "rejoin-ignores-old-leader",
		File: "ha/rejoin.go",
		Old:  "\t\tcase s.Leader != 0:",
		New:  "\t\tcase false && s.Leader != 0:",
		Tests: [][]string{
			{"./ha", "-run", "TestRejoinRefusedWhileOldPeersMayHoldQuorum|TestPlanRejoin"},
			{"./cmd/stratum/cli", "-run", "Rejoin"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "vipserves-skips-verify",
		File: "ha/repoint.go",
		Old:  "TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: ip.String(), MinVersion: tls.VersionTLS12},",
		New:  "TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: ip.String(), MinVersion: tls.VersionTLS12, InsecureSkipVerify: true},",
		Tests: [][]string{
			{"./ha", "-run", "Repoint"},
			{"./cmd/stratum/cli", "-run", "Repoint"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "gate-ignores-alarms",
		File: "ha/etcd.go",
		Old:  "if m.Err == nil && len(m.Alarms) > 0 {",
		New:  "if false && m.Err == nil && len(m.Alarms) > 0 {",
		Tests: [][]string{
			{"./ha", "-run", "TestEtcdClusterVerdict|TestEtcdClusterHealthy|TestJoinRefusedWhileClusterUnhealthy"},
			{"./scenarios", "-run", "TestSplitBrain$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "discovery-skips-ca-hash",
		File: "internal/discovery/discovery.go",
		Old:  "err := pki.CheckCAHash(one, pin)",
		New:  "err := pki.CheckCAHash(one, pin); err = nil",
		Tests: [][]string{
			{"./internal/discovery"},
			{"./ha", "-run", "TestJoinRefusalsChangeNothing"},
		},
	},
	{
		Name: "certs-reader-reads-every-secret",
		File: "ha/rbac.go",
		Old:  "WithResources(\"secrets\").WithResourceNames(certsSecret).WithVerbs(\"get\"),",
		New:  "WithResources(\"secrets\").WithVerbs(\"get\"),",
		Tests: [][]string{
			{"./ha", "-run", "TestCertsAuthorizationMatrix|TestGrantAppliesCertsReaderRole|TestNarrowCertsReaderBinding"},
			{"./scenarios", "-run", "TestExpiredGrant$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "join-ignores-retained-data",
		File: "ha/join.go",
		Old:  "\tif len(entries) > 0 {\n\t\treturn fmt.Errorf(\"%w in %s; nothing was changed",
		New:  "\tif len(entries) > 1000 {\n\t\treturn fmt.Errorf(\"%w in %s; nothing was changed",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing|TestRetainedData"},
			{"./cmd/stratum/cli", "-run", "Join|Server"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "restore-skips-hash-check",
		File: "ha/snapshot.go",
		Old:  "\t\tMarkCompacted:       true,\n\t}); err != nil {",
		New:  "\t\tMarkCompacted:       true,\n\t\tSkipHashCheck:       true,\n\t}); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "Snapshot|Restore"},
			{"./cmd/stratum/cli", "-run", "Snapshot|Restore"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "restore-no-revision-bump",
		File: "ha/snapshot.go",
		Old:  "\t\tRevisionBump:        bump,\n\t\tMarkCompacted:       true,\n",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "Snapshot|Restore"},
			{"./cmd/stratum/cli", "-run", "Snapshot|Restore"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "restore-bump-zero",
		File: "ha/snapshot.go",
		Old:  "\t\tRevisionBump:        bump,\n",
		New:  "\t\tRevisionBump:        0,\n",
		Tests: [][]string{
			{"./ha", "-run", "Snapshot|Restore"},
		},
	},
	{
		Name: "token-expiry-a-year-late",
		File: "internal/token/token.go",
		Old:  "keyExpiration:  expires.UTC().Format(time.RFC3339),",
		New:  "keyExpiration:  expires.AddDate(1, 0, 0).UTC().Format(time.RFC3339),",
		Tests: [][]string{
			{"./internal/token"},
			{"./ha", "-run", "TestPruneExpiredGrants|TestCerts"},
			{"./scenarios", "-run", "TestExpiredGrant$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "restore-not-marked-compacted",
		File: "ha/snapshot.go",
		Old:  "\t\tMarkCompacted:       true,\n",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "Snapshot|Restore"},
			{"./cmd/stratum/cli", "-run", "Snapshot|Restore"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "midway-reported-as-refusal",
		File: "ha/refusal.go",
		Old:  "\tcase *changed:\n\t\t*errp = Midway(*errp)",
		New:  "\tcase false && *changed:\n\t\t*errp = Midway(*errp)",
		Tests: [][]string{
			{"./ha", "-run", "Refus|Midway|TestPlan"},
			{"./cmd/stratum/cli"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "renew-drops-vip-san",
		File: "ha/renew.go",
		Old:  "sans, err := apiSANs(st.VIP.Address, netc)",
		New:  "sans, err := apiSANs(\"\", netc)",
		Tests: [][]string{
			{"./ha", "-run", "Renew|Certs"},
			{"./cmd/stratum/cli", "-run", "Renew|Certs"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "renew-keeps-the-vip-through-restarts",
		File: "ha/renew.go",
		Old:  "\tif vipRuns {\n\t\t// From the VIP candidate's stop",
		New:  "\tif false && vipRuns {\n\t\t// From the VIP candidate's stop",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestTokenCreateSurvivesAVIPMove"},
		},
	},
	{
		Name: "renew-restarts-nothing",
		File: "ha/renew.go",
		Old:  "\tfor _, s := range renewRestartOrder {",
		New:  "\tfor _, s := range renewRestartOrder[:0] {",
		Tests: [][]string{
			{"./ha", "-run", "Renew|Certs"},
			{"./cmd/stratum/cli", "-run", "Renew|Certs"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=2", "-rapid.steps=8"},
		},
	},
	{
		Name: "etcd-wipe-removes-the-disk",
		File: "ha/etcddata.go",
		Old:  "func wipeEtcdData(h host.Files) error {\n",
		New:  "func wipeEtcdData(h host.Files) error {\n\tif true {\n\t\treturn h.RemoveAll(version.EtcdDataDir)\n\t}\n",
		Tests: [][]string{
			{"./ha", "-run", "TestWipeEtcdData"},
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "lost-found-taken-for-etcd-data",
		File: "ha/etcddata.go",
		Old:  "func isLostFound(e fs.DirEntry) bool { return e.Name() == lostFound && e.IsDir() }",
		New:  "func isLostFound(e fs.DirEntry) bool { return false && e.Name() == lostFound && e.IsDir() }",
		Tests: [][]string{
			{"./ha", "-run", "TestWipeEtcdData"},
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "two-publications-of-one-node-share-the-fence",
		File: "ha/certs.go",
		Old:  "release, err := nodelock.Acquire(n.env.Host, nodelock.Fence, what)",
		New:  "release, err := func() error { return nil }, error(nil)\n\t_ = nodelock.Fence",
		Tests: [][]string{
			{"./ha", "-run", "TestFencedPublications"},
		},
	},
	{
		Name: "etcd-started-where-its-data-is-missing",
		File: "ha/etcddata.go",
		Old:  "\tif !st.Etcd.Started {\n\t\treturn nil\n\t}\n\tmember := ",
		New:  "\tif true || !st.Etcd.Started {\n\t\treturn nil\n\t}\n\tmember := ",
		Tests: [][]string{
			{"./ha", "-run", "TestUpRefusesAMemberWhoseDataIsNotThere"},
		},
	},
	{
		Name: "member-add-of-a-name-taken",
		File: "ha/membership.go",
		Old:  "if m := memberByName(ml.Members, newName); m != nil {",
		New:  "if m := memberByName(ml.Members, newName); false && m != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing"},
		},
	},
	{
		Name: "clients-through-the-environments-proxy",
		File: "internal/kubeconfig/kubeconfig.go",
		Old:  "\tcfg.Proxy = noProxy\n",
		New:  "\t_ = noProxy\n",
		Tests: [][]string{
			{"./internal/kubeconfig"},
		},
	},
	{
		Name: "vip-renewed-on-a-deleted-interface",
		File: "internal/vip/netlink_linux.go",
		Old:  "err == nil && cur.Attrs().Index != link.Attrs().Index {",
		New:  "err == nil && false && cur.Attrs().Index != link.Attrs().Index {",
		Tests: [][]string{
			{"./internal/vip", "-run", "TestNetlinkAnnouncer"},
		},
	},
	{
		Name: "restore-scratch-in-a-tmpfs",
		File: "ha/snapshot.go",
		Old:  "if t, err := fsType(\"/tmp\"); err == nil && t == tmpfsMagic {",
		New:  "if t, err := fsType(\"/tmp\"); err == nil && t == tmpfsMagic && false {",
		Tests: [][]string{
			{"./ha", "-run", "TestRestoreTempDirAvoidsATmpfs"},
		},
	},
	{
		Name: "rejoin-starts-a-member-whose-data-is-lost",
		File: "ha/rejoin.go",
		Old:  "if o.Self != seedNone && belongs && !o.DataLost {",
		New:  "if o.Self != seedNone && belongs {",
		Tests: [][]string{
			{"./ha", "-run", "TestPlanRejoin|TestRejoinBringsBackAJoinedMemberWhoseDataIsLost"},
		},
	},
	{
		Name: "restart-fails-when-it-cannot-republish",
		File: "ha/bootstrap.go",
		Old:  "\tif err := n.publishForJoiners(ctx, st, republishForJoinersWithin); err != nil {\n",
		New:  "\tif err := n.publishForJoiners(ctx, st, republishForJoinersWithin); err != nil {\n\t\treturn st, err\n\t} else if false {\n",
		Tests: [][]string{
			{"./ha", "-run", "TestUpOfANodeWithStateServesWhenItCannotPublish"},
		},
	},
	{
		Name: "status-silent-on-expired-certificates",
		File: "cmd/stratum/cli/services.go",
		Old:  "if len(rep.CertificatesExpired) > 0 {",
		New:  "if false && len(rep.CertificatesExpired) > 0 {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestCertsCheckAndRenew"},
		},
	},
	{
		Name: "in-process-panic-ends-the-supervisor",
		File: "internal/supervisor/supervisor.go",
		Old:  "ch <- runRecovered(rctx, u.spec.Name, u.spec.Run)",
		New:  "ch <- u.spec.Run(rctx)",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestInProcessService"},
		},
	},
	{
		Name: "nospace-alarm-without-advice",
		File: "ha/etcd.go",
		Old:  "if slices.ContainsFunc(alarms, isNoSpace) {",
		New:  "if false && slices.ContainsFunc(alarms, isNoSpace) {",
		Tests: [][]string{
			{"./ha", "-run", "TestAlarmAdviceSaysWhatClearsIt"},
		},
	},
	{
		Name: "etcd-relaunched-where-its-data-is-missing",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if err := ha.RefuseMissingEtcdData(h, st); err != nil {",
		New:  "if err := ha.RefuseMissingEtcdData(h, st); false && err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdRelaunchWaitsForItsData"},
		},
	},
	{
		Name: "defrag-of-an-unhealthy-cluster",
		File: "ha/etcd_space.go",
		Old:  "if err := clusterVerdict(judged); err != nil {",
		New:  "if err := clusterVerdict(judged); false && err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestDefragmentEtcd"},
			{"./cmd/stratum/cli", "-run", "TestEtcdDefrag"},
		},
	},
	{
		Name: "defrag-of-the-leader-first",
		File: "ha/etcd_space.go",
		Old:  "\t\tcase a.leader:\n\t\t\treturn 1\n",
		New:  "\t\tcase a.leader:\n\t\t\treturn -1\n\t\tcase b.leader:\n\t\t\treturn 1\n",
		Tests: [][]string{
			{"./ha", "-run", "TestDefragmentEtcd"},
		},
	},
	{
		Name: "nospace-left-raised-after-defrag",
		File: "ha/etcd_space.go",
		Old:  "\t\tif a.Alarm != etcdserverpb.AlarmType_NOSPACE {\n",
		New:  "\t\tif true || a.Alarm != etcdserverpb.AlarmType_NOSPACE {\n",
		Tests: [][]string{
			{"./ha", "-run", "TestDefragmentEtcd"},
		},
	},
	{
		Name: "space-warning-silent",
		File: "ha/etcd_space.go",
		Old:  "float64(m.DBSize) < EtcdSpaceWarnAt*float64(m.DBQuota)",
		New:  "float64(m.DBSize) < 2*float64(m.DBQuota)",
		Tests: [][]string{
			{"./ha", "-run", "TestSpaceWarning"},
		},
	},
	{
		Name: "join-ignores-the-cluster-quota",
		File: "ha/join.go",
		Old:  "quota := clusterQuota(health)",
		New:  "quota := 0 * clusterQuota(health)",
		Tests: [][]string{
			{"./ha", "-run", "TestUpBootstrapsThenJoinsFromAFreshCluster"},
		},
	},
	{
		Name: "quota-under-the-database",
		File: "ha/etcd_space.go",
		Old:  "if float64(size) >= EtcdSpaceWarnAt*float64(want) {",
		New:  "if false && float64(size) >= EtcdSpaceWarnAt*float64(want) {",
		Tests: [][]string{
			{"./ha", "-run", "TestSetEtcdQuota"},
		},
	},
	{
		Name: "rejoin-keeps-its-own-quota",
		File: "ha/rejoin.go",
		Old:  "if q, ok := n.quotaOf(ctx, seed); ok {",
		New:  "if q, ok := n.quotaOf(ctx, seed); false && ok {",
		Tests: [][]string{
			{"./ha", "-run", "TestRejoinBringsBackAJoinedMemberWhoseDataIsLost"},
		},
	},
	{
		Name: "quota-judged-without-a-running-etcd",
		File: "ha/etcd_space.go",
		Old:  "if size, err = etcdDatabaseSize(h); err != nil {",
		New:  "if size, err = 0, error(nil); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestSetEtcdQuota"},
		},
	},
	{
		Name: "operator-deletes-tokens-it-did-not-mint",
		File: "internal/token/token.go",
		Old:  `IDFromSecretName(s.Name) == "" || kindOf(s) == "other" {`,
		New:  `IDFromSecretName(s.Name) == "" {`,
		Tests: [][]string{
			{"./ha", "-run", "TestOperatorPassCollectsExpiredTokens"},
		},
	},
	{
		Name: "operator-keeps-expired-tokens",
		File: "ha/operator.go",
		Old:  "if rep.TokensDeleted, perr = n.DeleteExpiredTokens(ctx, cs); perr != nil {",
		New:  "if false {",
		Tests: [][]string{
			{"./ha", "-run", "TestOperatorPassCollectsExpiredTokens"},
		},
	},
	{
		Name: "shared-certs-deleted-with-a-live-owner",
		File: "ha/certs_collect.go",
		Old:  "if len(live) == 0 {",
		New:  "if len(gone) > 0 {",
		Tests: [][]string{
			{"./ha", "-run", "TestOperatorPassCollectsExpiredTokens"},
		},
	},
	{
		Name: "shared-certs-outlive-their-last-token",
		File: "ha/certs_collect.go",
		Old:  "if len(live) == 0 {",
		New:  "if len(live) == -1 {",
		Tests: [][]string{
			{"./ha", "-run", "TestOperatorPassCollectsExpiredTokens"},
		},
	},
	{
		Name: "mint-fails-when-its-certs-were-collected",
		File: "ha/certs.go",
		Old:  "return deletionAsConflict(err)",
		New:  "return err",
		Tests: [][]string{
			{"./ha", "-run", "TestOperatorPassCollectsExpiredTokens"},
		},
	},
	{
		Name: "pod-cidr-over-the-node-ip",
		File: "internal/netcfg/netcfg.go",
		Old:  "if !p.Contains(a) {",
		New:  "if true {",
		Tests: [][]string{
			{"./internal/netcfg", "-run", "TestCheckOutsideRanges"},
			{"./cmd/stratum/cli", "-run", "TestUpRefusesBadOptionsBeforeWriting"},
		},
	},
	{
		Name: "join-inside-the-pod-range",
		File: "ha/join.go",
		Old:  `if err := checkOutsideRanges(clusterNet, c.IP, "", false); err != nil {`,
		New:  `if err := checkOutsideRanges(clusterNet, c.IP, "", false); false && err != nil {`,
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing"},
		},
	},
	{
		Name: "pod-range-over-the-host-trusted",
		File: "internal/host/prepare.go",
		Old:  "\t\t\treturn err == nil && p.Contains(a.Unmap())\n\t\t}); i >= 0 {",
		New:  "\t\t\treturn err == nil && p.Contains(a.Unmap())\n\t\t}); false && i >= 0 {",
		Tests: [][]string{
			{"./internal/host", "-run", "TestTrustPodCIDRs"},
		},
	},
	{
		Name: "bootstrap-on-a-vip-in-use",
		File: "ha/bootstrap.go",
		Old:  "if err := r.n.refuseVIPServedElsewhere(ctx, o.VIP.Address, nil); err != nil {",
		New:  "if err := r.n.refuseVIPServedElsewhere(ctx, o.VIP.Address, nil); false && err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing"},
		},
	},
	{
		Name: "vip-adoption-refused-in-its-own-cluster",
		File: "ha/vip_probe.go",
		Old:  "	if verified {",
		New:  "	if false && verified {",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "downgraded-etcd-refused",
		File: "internal/controlplane/controlplane.go",
		Old:  `		{version.EtcdPrevious, "etcd Version: " + strings.TrimPrefix(version.EtcdPrevious, "v")},`,
		New:  ``,
		Tests: [][]string{
			{"./internal/controlplane", "-run", "TestBinariesCheck"},
			{"./cmd/stratum/cli", "-run", "TestEtcdStatusSaysItsBinarysVersion"},
		},
	},
	{
		Name: "etcd-status-says-the-pinned-version",
		File: "internal/supervisor/supervisor.go",
		Old:  "		st.Version = u.spec.VersionOf()",
		New:  "		st.Version = u.spec.Version",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdStatusSaysItsBinarysVersion"},
		},
	},
	{
		Name: "failed-start-stops-a-voter",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "	if err != nil || !counts {",
		New:  "	if err != nil || counts || !counts {",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "retried-start-bootstraps",
		File: "ha/bootstrap.go",
		Old:  "	return n.restart(ctx, o, holder)\n}",
		New:  "	return n.Up(ctx, o)\n}",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing"},
		},
	},
	{
		Name: "previous-etcd-for-a-new-member",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if st, serr := nodestate.Load(v.state); serr != nil || !st.Etcd.Started {",
		New:  "if st, serr := nodestate.Load(v.state); false && (serr != nil || !st.Etcd.Started) {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdStatusSaysItsBinarysVersion"},
		},
	},
	{
		Name: "second-node-ip-not-judged",
		File: "ha/bootstrap.go",
		Old:  `	for _, ip := range strings.Split(nodeIPs, ",") {`,
		New:  `	for _, ip := range strings.Split(nodeIPs, ",")[:1] {`,
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpRefusesBadOptionsBeforeWriting"},
		},
	},
	{
		Name: "retried-start-refuses-rather-than-yields",
		File: "ha/bootstrap.go",
		Old:  "const RetriedStartHolder = nodelock.YieldMark + \"the supervisor's retried start",
		New:  "const RetriedStartHolder = \"the supervisor's retried start",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing"},
		},
	},
	{
		Name: "supervisor-ends-on-missing-etcd-data",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if errors.Is(err, ha.ErrEtcdDataMissing) {\n\t\tst, err = a.waitForEtcdData(",
		New:  "if false && errors.Is(err, ha.ErrEtcdDataMissing) {\n\t\tst, err = a.waitForEtcdData(",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "member-remove-takes-a-healthy-voter",
		File: "cmd/stratum/cli/member.go",
		Old:  `if p.Target.Health == "healthy" && !self {`,
		New:  `if false && p.Target.Health == "healthy" && !self {`,
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestPlanRemoval|TestEtcdMemberRemove"},
		},
	},
	{
		Name: "status-hides-an-unfinished-reset",
		File: "cmd/stratum/cli/services.go",
		Old:  "\tif rep.ResetUnderWay {\n\t\treturn fmt.Errorf(\"a `stratum reset` of",
		New:  "\tif rep.ResetUnderWay && rep.Node == nil {\n\t\treturn fmt.Errorf(\"a `stratum reset` of",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestReportsAndDryRunsChangeNothing"},
		},
	},
	{
		Name: "renew-restarts-etcd-on-an-unhealthy-cluster",
		File: "ha/renew.go",
		Old:  "\tif err := n.refuseRenewOnUnhealthyCluster(ctx, st); err != nil {",
		New:  "\tif err := n.refuseRenewOnUnhealthyCluster(ctx, st); false && err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestRenewCertsRefusedWithAMemberDown"},
			{"./cmd/stratum/cli", "-run", "TestCertsRenewRefusedWithAMemberDown"},
		},
	},
	{
		Name: "node-state-field-without-a-format-version",
		File: "internal/nodestate/nodestate.go",
		Old:  "const CurrentVersion = 2",
		New:  "const CurrentVersion = 1",
		Tests: [][]string{
			{"./internal/nodestate"},
		},
	},
	{
		Name: "restart-at-a-moved-node-ip",
		File: "ha/bootstrap.go",
		Old:  "	if err := refuseMovedNodeIP(h, saved); err != nil {",
		New:  "	if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestUpRefusesAMemberWhoseDataIsNotThere"},
		},
	},
	{
		Name: "reset-without-the-published-members",
		File: "ha/reset.go",
		Old:  "\tif err != nil && !o.removed && st != nil {",
		New:  "\tif false && err != nil && !o.removed && st != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestResetOfTheFirstControlPlaneWithItsEtcdStopped"},
		},
	},
	{
		Name: "apiserver-without-node-restriction",
		File: "internal/controlplane/controlplane.go",
		Old:  `"--enable-admission-plugins=NodeRestriction",`,
		New:  `"--enable-admission-plugins=NamespaceLifecycle",`,
		Tests: [][]string{
			{"./ha", "-run", "TestAPIServerServesKubeletsAndAggregatedAPIs"},
		},
	},
	{
		Name: "apiserver-without-a-kubelet-client-certificate",
		File: "internal/controlplane/controlplane.go",
		Old:  "\t\t\"--kubelet-client-certificate=\" + pki(\"apiserver-kubelet-client.crt\"),\n\t\t\"--kubelet-client-key=\" + pki(\"apiserver-kubelet-client.key\"),\n",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "TestAPIServerServesKubeletsAndAggregatedAPIs"},
		},
	},
	{
		Name: "apiserver-without-the-front-proxy-ca",
		File: "internal/controlplane/controlplane.go",
		Old:  "\t\t\"--requestheader-client-ca-file=\" + pki(\"front-proxy-ca.crt\"),\n",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "TestAPIServerServesKubeletsAndAggregatedAPIs"},
		},
	},
	{
		Name: "snapshot-save-by-the-private-directory-name",
		File: "ha/snapshot.go",
		Old:  `saved := filepath.Join(fdPath(own), "snapshot.db")`,
		New:  `saved := filepath.Join(private, "snapshot.db")`,
		Tests: [][]string{
			{"./ha", "-run", "TestSnapshotSaveThroughASwappedPrivateDir"},
		},
	},
	{
		Name: "control-plane-grant-without-a-ttl-bound",
		File: "cmd/stratum/cli/flow.go",
		Old:  "case controlPlane && ttl > maxControlPlaneGrantTTL:",
		New:  "case false && controlPlane && ttl > maxControlPlaneGrantTTL:",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUsageErrorsExit2|TestMCPServer"},
		},
	},
	{
		Name: "mcp-mints-control-plane-grants-unasked",
		File: "cmd/stratum/cli/mcp.go",
		Old:  "if in.ControlPlane && !allow.ControlPlaneGrants {",
		New:  "if false && in.ControlPlane && !allow.ControlPlaneGrants {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestMCPServer"},
		},
	},
	{
		Name: "admin-credential-in-system-masters",
		File: "internal/kubeconfig/kubeconfig.go",
		Old:  "Admin:             {pki.AdminCN, []string{pki.ClusterAdminsGroup}},",
		New:  "Admin:             {pki.AdminCN, []string{pki.MastersGroup}},",
		Tests: [][]string{
			{"./internal/kubeconfig"},
			{"./ha", "-run", "TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "kubelet-client-in-system-masters",
		File: "internal/pki/node.go",
		Old:  "CommonName: APIServerKubeletClientCN, Organization: []string{ClusterAdminsGroup}, Client: true,",
		New:  "CommonName: APIServerKubeletClientCN, Organization: []string{MastersGroup}, Client: true,",
		Tests: [][]string{
			{"./internal/pki"},
			{"./ha", "-run", "TestAPIServerServesKubeletsAndAggregatedAPIs|TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "start-without-binding-cluster-admins",
		File: "ha/up.go",
		Old:  `{"", "cluster admins bound", n.bindClusterAdmins},`,
		New:  ``,
		Tests: [][]string{
			{"./ha", "-run", "TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "cluster-admins-binding-to-any-role",
		File: "internal/clusteradmins/clusteradmins.go",
		Old:  "return b.RoleRef == roleRef() && slices.Contains(b.Subjects, groupSubject())",
		New:  "return slices.Contains(b.Subjects, groupSubject())",
		Tests: [][]string{
			{"./ha", "-run", "TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "cluster-admins-binding-drops-added-subjects",
		File: "internal/clusteradmins/clusteradmins.go",
		Old:  "mended.Subjects = append(mended.Subjects, groupSubject())",
		New:  "mended.Subjects = []rbacv1.Subject{groupSubject()}",
		Tests: [][]string{
			{"./ha", "-run", "TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "renew-without-binding-cluster-admins",
		File: "ha/renew.go",
		Old:  "if failed == nil && slices.Contains(restarted, ServiceAPIServer) {",
		New:  "if false && failed == nil && slices.Contains(restarted, ServiceAPIServer) {",
		Tests: [][]string{
			{"./ha", "-run", "TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "failed-bind-stops-the-start",
		File: "ha/up.go",
		Old:  "} else if errors.As(err, &warned) {",
		New:  "} else if false && errors.As(err, &warned) {",
		Tests: [][]string{
			{"./ha", "-run", "TestUpOfANodeWithStateServesWhenItCannotPublish|TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "cluster-admins-binding-being-deleted-taken-as-bound",
		File: "internal/clusteradmins/clusteradmins.go",
		Old:  "slices.Contains(b.Subjects, groupSubject()) && b.DeletionTimestamp == nil",
		New:  "slices.Contains(b.Subjects, groupSubject())",
		Tests: [][]string{
			{"./ha", "-run", "TestAdminCredentialIsBoundNotSuperuser"},
		},
	},
	{
		Name: "binary-version-by-substring",
		File: "internal/controlplane/controlplane.go",
		Old:  "if strings.TrimSpace(line) == says {",
		New:  "if strings.Contains(line, says) {",
		Tests: [][]string{
			{"./internal/controlplane", "-run", "TestBinariesCheck"},
		},
	},
	{
		Name: "status-without-service-versions",
		File: "cmd/stratum/cli/services.go",
		Old:  "Detail: st.Detail, Version: st.Version})",
		New:  "Detail: st.Detail})",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestReportsAndDryRunsChangeNothing"},
		},
	},
	{
		Name: "etcd-members-without-versions",
		File: "cmd/stratum/cli/flow.go",
		Old:  `r.Version = "v" + strings.TrimPrefix(st.Version, "v")`,
		New:  `_ = st.Version`,
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdMemberRemove"},
		},
	},
	{
		Name: "etcd-relaunched-unchecked",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if err := binary.launchable(context.Background()); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdRelaunchWaitsForItsData"},
		},
	},
	{
		Name: "apiserver-launched-unchecked",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if err := bins.Check(context.Background(), controlplane.APIServerBinary); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdStatusSaysItsBinarysVersion"},
		},
	},
	{
		Name: "supervisor-never-ready",
		File: "cmd/stratum/cli/supervise.go",
		Old:  `a.settle(sup, supervisor.StateSupervising, "supervising this control plane: etcd, kube-apiserver and what the node runs are up")`,
		New:  `sup.SetState(supervisor.StateSupervising)`,
		Tests: [][]string{
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "etcd-data-wait-never-ready",
		File: "cmd/stratum/cli/supervise.go",
		Old:  `a.settle(sup, "waiting for its etcd data", `,
		New:  `func(s *supervisor.Supervisor, state, status string) { s.SetState(state); a.notify(sdnotify.Status(status)) }(sup, "waiting for its etcd data", `,
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "children-see-the-notify-socket",
		File: "internal/supervisor/supervisor.go",
		Old:  "cmd.Env = append(childEnv(os.Environ()), c.Env...)",
		New:  "cmd.Env = append(os.Environ(), c.Env...)",
		Tests: [][]string{
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "etcd-launch-applies-the-served-rule",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if err := binary.launchable(context.Background()); err != nil {",
		New:  "if err := binary.check(context.Background()); err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdStatusSaysItsBinarysVersion"},
		},
	},
	{
		Name: "restart-stops-before-its-launch-is-checked",
		File: "internal/supervisor/supervisor.go",
		Old:  "if _, err := u.spec.Command(); err != nil {",
		New:  "if _, err := u.spec.Command(); false && err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdRelaunchWaitsForItsData"},
		},
	},
	{
		Name: "reset-wipes-staged-bin-dirs",
		File: "ha/reset.go",
		Old:  "return holdsBinary(h, p, binDirDepth)",
		New:  "return false",
		Tests: [][]string{
			{"./ha", "-run", "TestResetUndoesACrashedJoin"},
		},
	},
	{
		Name: "unit-runs-the-resolved-stratum",
		File: "cmd/stratum/cli/services.go",
		Old:  "if aerr == nil && berr == nil && os.SameFile(a, b) {",
		New:  "if false && aerr == nil && berr == nil && os.SameFile(a, b) {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUnitRunsTheStratumAsInvoked"},
		},
	},
	{
		Name: "newer-grant-blames-the-key",
		File: "ha/certs.go",
		Old:  "if errors.Is(err, certbundle.ErrUnknownContent) {",
		New:  "if false && errors.Is(err, certbundle.ErrUnknownContent) {",
		Tests: [][]string{
			{"./ha", "-run", "TestCertsAuthorizationMatrix"},
		},
	},
	{
		Name: "newer-grants-field-called-malformed",
		File: "internal/certbundle/bundle.go",
		Old:  `if strings.HasPrefix(err.Error(), "json: unknown field ") {`,
		New:  `if false && strings.HasPrefix(err.Error(), "json: unknown field ") {`,
		Tests: [][]string{
			{"./internal/certbundle", "-run", "TestOpenNamesANewerStratumsGrant"},
		},
	},
	{
		Name: "supervisor-runs-a-replaceable-stratum",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if err := refuseReplaceableSelf(os.Args[0]); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "link-chain-middle-hop-unchecked",
		File: "internal/controlplane/controlplane.go",
		Old:  "starts := linkChain(abs)",
		New:  "starts := []string{abs}",
		Tests: [][]string{
			{"./internal/controlplane", "-run", "TestBinariesCheck"},
		},
	},
	{
		Name: "traversal-name-called-a-newer-stratums",
		File: "internal/certbundle/bundle.go",
		Old:  "if fs.ValidPath(name) && path.Clean(name) == name && why != ErrMalformed {",
		New:  "if (fs.ValidPath(name) || true) && why != ErrMalformed {",
		Tests: [][]string{
			{"./internal/certbundle", "-run", "TestOpenNamesANewerStratumsGrant"},
		},
	},
	{
		Name: "status-silent-on-a-stratum-skew",
		File: "cmd/stratum/cli/services.go",
		Old:  `if runs, ok := strings.CutPrefix(st.Version, "stratum "); ok && runs != Version && rep.StratumSkew == "" {`,
		New:  `if runs, ok := strings.CutPrefix(st.Version, "stratum "); false && ok && runs != Version && rep.StratumSkew == "" {`,
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestStatusJudgesOnlyTheServicesThisNodeRuns"},
		},
	},
	{
		Name: "publish-returns-before-joiners-may-read",
		File: "internal/discovery/discovery.go",
		Old:  "return waitAnonymousReads(ctx, cs)",
		New:  "return nil",
		Tests: [][]string{
			{"./internal/discovery", "-run", "TestPublishReturnsOnceJoinersMayRead"},
		},
	},
	{
		Name: "upgrade-ignores-an-unhealthy-cluster",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "if rep, err := etcdHealth(ctx, n, st); err != nil {",
		New:  "if rep, err := etcdHealth(ctx, n, st); err != nil && false {",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "upgrade-returns-before-the-node-serves",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "u.saveSnapshot, u.replaceSupervisor, u.waitServing, u.waitHealthy, u.writeUnit}",
		New:  "u.saveSnapshot, u.replaceSupervisor, u.writeUnit}",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "upgrade-leaves-the-unit-on-the-old-stratum",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "	if u.unitPath == \"\" {\n		return nil\n	}\n	// What it was",
		New:  "	if true {\n		return nil\n	}\n	// What it was",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "upgrade-skips-an-etcd-minor",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "case tmaj > lmaj || tmin > lmin+1:",
		New:  "case false:",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpgradeVersionSteps"},
		},
	},
	{
		Name: "supervisor-replaced-while-not-supervising",
		File: "internal/supervisor/replace.go",
		Old:  "case s.state != StateSupervising:",
		New:  "case false:",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestReplacementIsJudgedThenDelivered"},
		},
	},
	{
		Name: "supervisor-replaced-by-a-replaceable-stratum",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if err := controlplane.RootOnlyWritable(r.Path); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestSupervisorIsReplacedOnlyByItsOwnKind"},
		},
	},
	{
		Name: "supervisor-runs-itself-instead-of-the-upgrade",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "err := a.opts.Exec(r.Path, r.Args, os.Environ())",
		New:  "err := a.opts.Exec(\"\", r.Args, os.Environ())",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "supervisor-replacement-skips-its-check",
		File: "internal/supervisor/replace.go",
		Old:  "if err := s.checkReplacement(r); err != nil {",
		New:  "if err := error(nil); err != nil {",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestReplacementIsJudgedThenDelivered"},
		},
	},
	{
		Name: "upgrade-takes-the-supervisor-asked-for-its-replacement",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "case asked != \"\" && about.Instance == asked:",
		New:  "case asked != \"\" && false:",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpgradeWaitsForTheReplacement"},
		},
	},
	{
		Name: "replacement-runs-despite-a-stop-signal",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "	if ctx.Err() != nil {\n		a.dropReplacement(r, ",
		New:  "	if false {\n		a.dropReplacement(r, ",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestAReplacementIsNotRunAfterAStopSignal"},
		},
	},
	{
		Name: "release-never-recorded",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "	go a.recordRelease(recording, l, n, sup, st)\n",
		New:  "	_ = recording\n",
		Tests: [][]string{
			{"./e2e", "-run", "TestSingleControlPlaneGrowsIntoHA"},
		},
	},
	{
		Name: "plan-takes-any-stratum-for-this-one",
		File: "cmd/stratum/cli/upgrade_plan.go",
		Old:  "case row.Stratum == to.Stratum && row.Etcd == to.Etcd",
		New:  "case row.Etcd == to.Etcd",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpgradePlanVerdicts"},
		},
	},
	{
		Name: "reset-keeps-its-release-record",
		File: "cmd/stratum/cli/reset.go",
		Old:  "				forget = a.releaseForgetter(h)",
		New:  "				_ = h",
		Tests: [][]string{
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "vip-serving-never-waited",
		File: "ha/up.go",
		Old:  "	deadline := time.Now().Add(vipServingWithin)\n	for {\n		ok, err :=",
		New:  "	deadline := time.Now().Add(vipServingWithin)\n	for ctx != nil {\n		return nil\n	}\n	for {\n		ok, err :=",
		Tests: [][]string{
			{"./ha", "-run", "TestStartWaitsForTheVIPToServe"},
		},
	},
	{
		Name: "unit-not-type-notify",
		File: "cmd/stratum/cli/services.go",
		Old:  "Type=notify\nNotifyAccess=main\n",
		New:  "Type=simple\nNotifyAccess=main\n",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "unit-never-restarts",
		File: "cmd/stratum/cli/services.go",
		Old:  "Restart=always\n",
		New:  "Restart=no\n",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "upgrade-unit-not-reloaded",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "systemctl(ctx, time.Minute, \"daemon-reload\")",
		New:  "systemctl(ctx, time.Minute, \"--version\")",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "replacement-loses-the-notify-socket",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "	err := a.opts.Exec(r.Path, r.Args, os.Environ())\n",
		New:  "	err := a.opts.Exec(r.Path, r.Args, nil)\n",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "release-member-never-refreshed",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "m.Err == nil && m.ID != 0 {\n\t\t\t\tmemberID, idRead = fmt.Sprintf",
		New:  "m.Err == nil && m.ID != 0 && memberID == \"\" {\n\t\t\t\tmemberID, idRead = fmt.Sprintf",
		Tests: [][]string{
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "publish-through-the-vip",
		File: "ha/bootstrap.go",
		Old:  "	cs, err := n.ownAdminClient(st.NodeIP)\n",
		New:  "	cs, err := n.adminClient()\n",
		Tests: [][]string{
			{"./ha", "-run", "TestStartWaitsForTheVIPToServe"},
		},
	},
	{
		Name: "vip-hold-failures-logged-every-time",
		File: "internal/vip/vip.go",
		Old:  "	if msg := err.Error(); msg != f.logged {",
		New:  "	if msg := err.Error(); msg != \"\" {",
		Tests: [][]string{
			{"./internal/vip", "-run", "TestElection/hold_fails_the_same_way"},
		},
	},
	{
		Name: "operator-forgets-fresh-release-records",
		File: "ha/operator.go",
		Old:  "ids[r.MemberID] || now.Sub(r.Since) < staleReleaseAfter {",
		New:  "ids[r.MemberID] || now.IsZero() {",
		Tests: [][]string{
			{"./ha", "-run", "TestOperatorPassPromotesAStrandedLearner"},
		},
	},
	{
		Name: "vip-hold-backoff-unused",
		File: "internal/vip/vip.go",
		Old:  "		case <-cfg.after(fails.backoff(cfg.RetryPeriod)):",
		New:  "		case <-cfg.after(cfg.RetryPeriod):",
		Tests: [][]string{
			{"./internal/vip", "-run", "TestElection/hold_fails_the_same_way"},
		},
	},
	{
		Name: "handoff-ignores-an-unhealthy-cluster",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "_, note, err := restartKeepsQuorum(ctx, n, st)\n",
		New:  "_, note, err := restartKeepsQuorum(ctx, n, st)\n\terr = nil\n",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "handoff-leaves-the-hand-supervisor-running",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "	if o.running == nil || o.underUnit {\n		return nil\n	}\n	pid := o.running.PID",
		New:  "	if true {\n		return nil\n	}\n	pid := o.running.PID",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "handoff-unit-not-enabled",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "systemctl(ctx, time.Minute, \"enable\", \"--quiet\", unitName)",
		New:  "systemctl(ctx, time.Minute, \"show\", unitName)",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "unit-supervisor-told-to-hand-itself-over",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if systemdRuns() && !inStratumUnit() && f.operator && handoff == nil {",
		New:  "if systemdRuns() && f.operator && handoff == nil {",
		Tests: [][]string{
			{"./e2e", "-run", "TestControlPlaneUnderSystemd"},
		},
	},
	{
		Name: "handoff-refuses-a-supervisor-that-began-stopping",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "		case now.State == supervisor.StateStopping:\n			o.stopping = true\n",
		New:  "",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoff"},
		},
	},
	{
		Name: "handoff-starts-the-unit-beside-the-hand-supervisor",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "for o.sys.processStart(pid) == o.runningStart && o.runningStart != \"\" {",
		New:  "for false && o.sys.processStart(pid) == o.runningStart && o.runningStart != \"\" {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoff"},
		},
	},
	{
		Name: "handoff-start-timeout-reported-as-a-failure",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "if err != nil && ctx.Err() == nil && cctx.Err() != nil {",
		New:  "if false && err != nil && ctx.Err() == nil && cctx.Err() != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoff"},
		},
	},
	{
		Name: "member-add-gives-up-on-a-quorum-lost-for-a-moment",
		File: "ha/membership.go",
		Old:  "if err != nil && !sent && errors.Is(err, errNoEndpointAnswered) {",
		New:  "if false && err != nil && !sent && errors.Is(err, errNoEndpointAnswered) {",
		Tests: [][]string{
			{"./ha", "-run", "TestMemberAddWaitsOutAQuorumLostForAMoment|TestJoinWaitsOutAQuorumLostForAMoment"},
		},
	},
	{
		Name: "promote-gives-up-on-a-quorum-lost-for-a-moment",
		File: "ha/membership.go",
		Old:  "if err == nil || !errors.Is(err, errNoEndpointAnswered) || ctx.Err() != nil {",
		New:  "if true || err == nil || !errors.Is(err, errNoEndpointAnswered) || ctx.Err() != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestPromoteWaitsOutAQuorumLostForAMoment|TestJoinWaitsOutAQuorumLostForAMoment"},
		},
	},
	{
		Name: "a-learner-endpoint-ends-the-ask",
		File: "ha/etcd.go",
		Old:  "if ctx.Err() == nil && etcdErrIs(err, rpctypes.ErrGRPCNotSupportedForLearner) {",
		New:  "if false && ctx.Err() == nil && etcdErrIs(err, rpctypes.ErrGRPCNotSupportedForLearner) {",
		Tests: [][]string{
			{"./ha", "-run", "TestPromoteWaitsOutAQuorumLostForAMoment"},
		},
	},
	{
		Name: "member-add-takes-a-lost-answer-for-nothing-added",
		File: "ha/membership.go",
		Old:  "if err != nil && !sent && errors.Is(err, errNoEndpointAnswered) {",
		New:  "if err != nil && errors.Is(err, errNoEndpointAnswered) {",
		Tests: [][]string{
			{"./ha", "-run", "TestMemberAddWhoseAnswerIsLostIsNotTakenAsNothingAdded"},
		},
	},
	{
		Name: "handoff-ignores-the-bin-dir-the-supervisor-runs",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "case about.Version != Version || filepath.Clean(about.BinDir) != o.binDir:",
		New:  "case about.Version != Version:",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoff"},
		},
	},
	{
		Name: "handoff-names-any-service-as-the-supervisors",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "if other := o.sys.unitOf(about.PID); other != \"\" && o.mainPID(ctx, other) == about.PID {",
		New:  "if other := o.sys.unitOf(about.PID); other != \"\" {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoff"},
		},
	},
	{
		Name: "member-remove-gives-up-on-a-quorum-lost-for-a-moment",
		File: "ha/membership.go",
		Old:  "if err == nil || !etcdErrIs(err, rpctypes.ErrUnhealthy) && !unanswered {",
		New:  "if err == nil || !etcdErrIs(err, rpctypes.ErrUnhealthy) {",
		Tests: [][]string{
			{"./ha", "-run", "TestMemberRemoveWaitsOutAQuorumLostForAMoment"},
		},
	},
	{
		Name: "join-gate-refuses-a-quorum-lost-for-a-moment",
		File: "ha/join.go",
		Old:  "case reason == \"\" || waited != \"\":",
		New:  "case true:",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinWaitsOutAQuorumLostForAMoment/after-kubeconfigs"},
		},
	},
	{
		Name: "join-gate-waits-out-a-raised-alarm",
		File: "ha/etcd.go",
		Old:  "if m.Err == nil && !strings.HasPrefix(a, alarmsUnreadable) {",
		New:  "if m.Err == nil && a == \"\" {",
		Tests: [][]string{
			{"./ha", "-run", "TestHealthWaitReasonOnlyForWhatAWaitCures"},
		},
	},
	{
		Name: "fence-confirm-waits-silently",
		File: "ha/join.go",
		Old:  "if err := n.waitingOn(\"the API server to answer the confirmation of this join's maintenance fence (it answers once its etcd does; nothing was added yet)\", confirm); err != nil {",
		New:  "if err := confirm(); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinWaitsOutAQuorumLostForAMoment/after-intent"},
		},
	},
	{
		Name: "install-now-runs-without-root",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "if !o.sys.root() {",
		New:  "if false {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoffCheckRefusesBeforeTheSupervisor"},
		},
	},
	{
		Name: "install-now-hands-over-an-unfinished-join",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "} else if what != \"\" {",
		New:  "} else if what == \"-\" {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoffCheckRefusesBeforeTheSupervisor"},
		},
	},
	{
		Name: "join-token-left-on-the-node",
		File: "ha/up.go",
		Old:  "\tn.stripJoinToken()\n",
		New:  "\t_ = n.stripJoinToken\n",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinTwoControlPlanes"},
		},
	},
	{
		Name: "repoint-races-a-start",
		File: "ha/repoint.go",
		Old:  "release, err := nodelock.Acquire(n.env.Host, nodelock.Maintenance, \"stratum repoint\", n.lockOptions(ctx)...)",
		New:  "release, err := func() error { return nil }, error(nil)\n\t_ = nodelock.Maintenance",
		Tests: [][]string{
			{"./ha", "-run", "TestNodeRepoint$"},
		},
	},
	{
		Name: "mcp-agent-forces-a-rejoin",
		File: "cmd/stratum/cli/mcp.go",
		Old:  "if in.Force && !in.DryRun && !allow.ForcedRejoin {",
		New:  "if in.Force && !in.DryRun && allow.ForcedRejoin && false {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestMCPServer$"},
		},
	},
	{
		Name: "join-start-races-a-repoint",
		File: "ha/join.go",
		Old:  "\t_, release, err := n.prepareControlPlaneJoin(ctx, o)\n\tdefer release()",
		New:  "\t_, release, err := n.prepareControlPlaneJoin(ctx, o)\n\trelease()",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestStartsHoldTheNode$"},
		},
	},
	{
		Name: "join-gives-up-its-locks-before-its-start",
		File: "ha/join.go",
		Old:  "\t_, release, err := n.prepareControlPlaneJoin(ctx, o)\n\tdefer release()",
		New:  "\t_, release, err := n.prepareControlPlaneJoin(ctx, o)\n\trelease()\n\tif err == nil {\n\t\tretaken, lerr := nodelock.AcquireBoth(n.env.Host, \"stratum server (control-plane join: its start)\")\n\t\tif lerr != nil {\n\t\t\treturn nil, lerr\n\t\t}\n\t\tdefer retaken()\n\t}",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinTwoControlPlanes$"},
		},
	},
	{
		Name: "bootstrap-starts-unlocked",
		File: "ha/bootstrap.go",
		Old:  "\tst, err := n.StartControlPlane(ctx)\n\tif err != nil {\n\t\t// Whatever the start refused: the node is laid out.",
		New:  "\tr.release()\n\tr.release = nil\n\tst, err := n.StartControlPlane(ctx)\n\tif err != nil {\n\t\t// Whatever the start refused: the node is laid out.",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestStartsHoldTheNode$"},
		},
	},
	{
		Name: "refused-join-undoes-unlocked",
		File: "ha/join.go",
		Old:  "\tst, reachedAdd, release, err := jn.prepareJoin(ctx, o)\n",
		New:  "\tst, reachedAdd, release, err := jn.prepareJoin(ctx, o)\n\trelease()\n",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing$"},
		},
	},
	{
		Name: "renew-reads-the-state-unlocked",
		File: "ha/renew.go",
		Old:  "release, err := nodelock.Acquire(h, nodelock.Maintenance, \"stratum certs renew\", n.lockOptions(ctx)...)\n\tif err != nil {\n\t\treturn nil, nil, err\n\t}\n\tdefer release()\n\tst, err := nodestate.Load(h)",
		New:  "st, err := nodestate.Load(h)\n\trelease, lerr := nodelock.Acquire(h, nodelock.Maintenance, \"stratum certs renew\", n.lockOptions(ctx)...)\n\tif lerr != nil {\n\t\treturn nil, nil, lerr\n\t}\n\tdefer release()",
		Tests: [][]string{
			{"./ha", "-run", "TestRenewCertsRefusedWithAMemberDown$"},
		},
	},
	{
		Name: "join-takes-a-starting-apiservers-401-for-good",
		File: "ha/certs.go",
		Old:  "\tcfg.Wrap(apiretry.RetryRefusedWhileUnready(func(why string) {\n\t\tmu.Lock()\n\t\tdefer mu.Unlock()\n\t\treport.waiting(\"%s\", why)\n\t}))",
		New:  "\t_ = apiretry.RetryRefusedWhileUnready(func(why string) {\n\t\tmu.Lock()\n\t\tdefer mu.Unlock()\n\t\treport.waiting(\"%s\", why)\n\t})",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinClientWaitsOutAStartingAPIServer$"},
			{"./scenarios", "-run", "TestMaintenance$", "-rapid.checks=0"},
		},
	},
	{
		Name: "join-discovery-gives-up-after-10s",
		File: "ha/join.go",
		Old:  "n.askWhileSilent(ctx, o.Server, joinSilentWithin,",
		New:  "n.askWhileSilent(ctx, o.Server, silentWithin,",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinWaitsOutAServerSilentForAWhile$"},
		},
	},
	{
		Name: "join-discovery-takes-a-starting-apiservers-403-for-good",
		File: "internal/discovery/discovery.go",
		Old:  "if why := notReady(ctx, client, server); why != \"\" {",
		New:  "if why := \"\"; why != \"\" && notReady(ctx, client, server) != \"\" {",
		Tests: [][]string{
			{"./internal/discovery", "-run", "TestFetchCARefusedBeforeReady$"},
			{"./ha", "-run", "TestJoinClientWaitsOutAStartingAPIServer$"},
		},
	},
	{
		Name: "join-client-takes-an-unready-apiservers-403-for-good",
		File: "internal/apiretry/apiretry.go",
		Old:  "(resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden)",
		New:  "resp.StatusCode != http.StatusUnauthorized",
		Tests: [][]string{
			{"./internal/apiretry", "-run", "TestRetryRefusedWhileUnready$"},
			{"./ha", "-run", "TestJoinClientWaitsOutAStartingAPIServer$"},
		},
	},
	{
		Name: "write-on-a-closed-kept-alive-connection-not-lost",
		File: "internal/apiretry/apiretry.go",
		Old:  "|| strings.Contains(err.Error(), serverClosedIdle) {",
		New:  "|| serverClosedIdle == \"\" {",
		Tests: [][]string{
			{"./internal/apiretry", "-run", "TestLostConnectionAfterTheHandshake$"},
		},
	},
	{
		Name: "discovery-takes-a-refusal-just-before-ready-for-good",
		File: "internal/discovery/discovery.go",
		Old:  "\t\t\tif !readyBefore {\n\t\t\t\tcontinue",
		New:  "\t\t\tif !readyBefore && readyBefore {\n\t\t\t\tcontinue",
		Tests: [][]string{
			{"./internal/discovery", "-run", "TestFetchCARefusedBeforeReady$"},
		},
	},
	{
		Name: "downgrade-refuses-an-election-at-once",
		File: "ha/downgrade.go",
		Old:  "if err := n.waitClusterHealthy(ctx, hosts, \"before the downgrade is asked of it (nothing was asked yet)\"); err != nil {",
		New:  "if err := n.EtcdClusterHealthy(ctx, hosts); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestDowngradeEtcd$"},
		},
	},
	{
		Name: "cli-admin-client-takes-an-unready-apiservers-403-for-good",
		File: "cmd/stratum/cli/flow.go",
		Old:  "\tcfg.Wrap(apiretry.RetryRefusedWhileUnready(waiting))\n",
		New:  "\t_ = apiretry.LostWait\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestAdminCommandsWaitOutAStartingAPIServer$"},
		},
	},
	{
		Name: "machine-output-progress-on-stdout",
		File: "cmd/stratum/cli/cli.go",
		Old:  "a.machineOutput = f.Value.String() == \"json\" || f.Value.String() == \"yaml\"",
		New:  "a.machineOutput = f.Value.String() == \"none\"",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestProgressLeavesAMachineDocumentAlone$"},
		},
	},
	{
		Name: "refused-join-leaves-a-file-it-removed-removed",
		File: "ha/join.go",
		Old:  "\tif !ours {\n\t\tif err := c.keep(p); err != nil {",
		New:  "\tif !ours && false {\n\t\tif err := c.keep(p); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestCertsAtRestKeyProofAndKeySetAt$"},
		},
	},
	{
		Name: "write-probe-leftover-taken-for-etcd-data",
		File: "ha/etcddata.go",
		Old:  "|| strings.HasPrefix(e.Name(), \".\"+writeProbe+\".tmp-\") {",
		New:  "|| strings.HasPrefix(e.Name(), \".\"+writeProbe+\".tmp-\") && false {",
		Tests: [][]string{
			{"./ha", "-run", "TestWipeEtcdDataKeepsALinkAndALostFound$"},
		},
	},
	{
		Name: "unreadable-data-replace-journal-taken-for-absent",
		File: "ha/datajournal.go",
		Old:  "return !errors.Is(err, fs.ErrNotExist)",
		New:  "return err == nil",
		Tests: [][]string{
			{"./ha", "-run", "TestDataReplaceUnderWayWhenUnsure$"},
		},
	},
	{
		Name: "join-fence-held-by-a-clock-ahead-said-as-a-bad-token",
		File: "ha/fence.go",
		Old:  "if apierrors.IsForbidden(err) && strings.Contains(err.Error(), fenceHeldDenial) {",
		New:  "if apierrors.IsForbidden(err) && strings.Contains(err.Error(), fenceHeldDenial) && false {",
		Tests: [][]string{
			{"./ha", "-run", "TestCertsAtRestKeyProofAndKeySetAt$"},
		},
	},
	{
		Name: "admin-download-rewrites-the-cas-unlocked",
		File: "ha/certs.go",
		Old:  "release, err := nodelock.Acquire(n.env.Host, nodelock.Maintenance, \"stratum download shared certificates (admin)\", n.lockOptions(ctx)...)",
		New:  "release, err := func() (func() error, error) { return func() error { return nil }, nil }()",
		Tests: [][]string{
			{"./ha", "-run", "TestCertsRekeyAndReUpload$"},
		},
	},
	{
		Name: "closing-terminals-second-sighup-forces-the-shutdown",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "if seen++; seen < 2 || s == syscall.SIGHUP {",
		New:  "if seen++; seen < 2 || s == syscall.SIGHUP && false {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestASecondSignalForcesTheShutdown$"},
		},
	},
	{
		Name: "closing-terminals-second-sighup-breaks-a-held-window",
		File: "internal/interrupt/interrupt.go",
		Old:  "if s == syscall.SIGHUP && (r.pending != nil || r.interrupted) {",
		New:  "if s == syscall.SIGHUP && (r.pending != nil || r.interrupted) && false {",
		Tests: [][]string{
			{"./internal/interrupt", "-run", "TestAClosingTerminalIsOneSignal$"},
		},
	},
	{
		Name: "second-interrupt-swallowed",
		File: "cmd/stratum/main.go",
		Old:  "\t\t\t\tsignal.Reset(sig)\n\t\t\t\t_ = syscall.Kill(syscall.Getpid(), sig)\n",
		New:  "\t\t\t\t_ = sig\n",
		Tests: [][]string{
			{"./cmd/stratum", "-run", "TestSecondInterruptEndsTheProcess$"},
		},
	},
	{
		Name: "closing-terminals-second-sighup-ends-an-interrupted-command",
		File: "cmd/stratum/main.go",
		Old:  "if s == syscall.SIGHUP || interrupt.Held() {",
		New:  "if interrupt.Held() {",
		Tests: [][]string{
			{"./cmd/stratum", "-run", "TestSecondInterruptEndsTheProcess$"},
		},
	},
	{
		Name: "stopped-cilium-wait-reported-as-a-timeout",
		File: "ha/repoint_cilium.go",
		Old:  "\t\t\tif ctx.Err() != nil {\n\t\t\t\treturn nil, fmt.Errorf(\"stopped waiting for Cilium's rollout",
		New:  "\t\t\tif ctx.Err() != nil && false {\n\t\t\t\treturn nil, fmt.Errorf(\"stopped waiting for Cilium's rollout",
		Tests: [][]string{
			{"./ha", "-run", "TestCiliumRolloutWaitStoppedSaysSo$"},
		},
	},
	{
		Name: "stopped-reset-and-rejoin-said-as-members-silent",
		File: "ha/refusal.go",
		Old:  "\tif ctx.Err() == nil {\n\t\treturn err\n\t}\n\treturn fmt.Errorf(\"%s stopped before it changed anything",
		New:  "\tif ctx.Err() == nil || true {\n\t\treturn err\n\t}\n\treturn fmt.Errorf(\"%s stopped before it changed anything",
		Tests: [][]string{
			{"./ha", "-run", "TestResetAndRejoinStoppedSaySo$"},
		},
	},
	{
		Name: "health-after-a-change-said-as-a-refusal",
		File: "ha/etcd_space.go",
		Old:  "\t\tmembers, _, err := n.spaceHealth(wctx, via, op)",
		New:  "\t\tmembers, _, err := n.healthyButForSpace(wctx, via, op, op)",
		Tests: [][]string{
			{"./ha", "-run", "TestSpaceHealthAfterAChangeIsNoRefusal$"},
		},
	},
	{
		Name: "log-removed-from-outside-shifted-on-every-write",
		File: "internal/rotlog/rotlog.go",
		Old:  "\tif !l.movedAside && err == nil {",
		New:  "\tif !l.movedAside && err == nil && false {",
		Tests: [][]string{
			{"./internal/rotlog", "-run", "TestALogRemovedFromOutsideIsOpenedAgain$"},
		},
	},
	{
		Name: "log-directory-removed-never-made-again",
		File: "internal/rotlog/rotlog.go",
		Old:  "if merr := os.MkdirAll(filepath.Dir(l.path), 0o750); merr == nil {",
		New:  "if merr := os.MkdirAll(filepath.Dir(l.path), 0o750); merr == nil && false {",
		Tests: [][]string{
			{"./internal/rotlog", "-run", "TestALogRemovedFromOutsideIsOpenedAgain$"},
		},
	},
	{
		Name: "service-left-down-by-a-log-that-cannot-open",
		File: "internal/supervisor/supervisor.go",
		Old:  "\t\tu.sup.log.Warn(\"the service runs without its log, its output lost\", \"service\", u.spec.Name, \"err\", err)\n",
		New:  "\t\treturn nil, nil, err\n",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestAServiceRunsWithoutItsLog$"},
		},
	},
	{
		Name: "shutdown-during-a-render-starts-the-process",
		File: "internal/supervisor/supervisor.go",
		Old:  "\tif err := ctx.Err(); err != nil {\n\t\t// A shutdown began while",
		New:  "\tif err := ctx.Err(); err != nil && false {\n\t\t// A shutdown began while",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestAShutdownDuringARenderStartsNothing$"},
		},
	},
	{
		Name: "rejoin-stopped-at-its-start-keeps-its-journal",
		File: "ha/rejoin.go",
		Old:  "\tif earlier || touched {",
		New:  "\tif earlier || touched || true {",
		Tests: [][]string{
			{"./ha", "-run", "TestRejoinBringsBackAJoinedMemberWhoseDataIsLost$"},
		},
	},
	{
		Name: "join-runs-on-after-its-signal-was-taken",
		File: "cmd/stratum/cli/node.go",
		Old:  "\t\t\t\tif err := cmd.Context().Err(); err != nil {",
		New:  "\t\t\t\tif err := cmd.Context().Err(); err != nil && false {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpAndJoinPrintTheirSteps$"},
		},
	},
	{
		Name: "restore-stopped-in-its-scratch-restore-goes-on",
		File: "ha/snapshot.go",
		Old:  "\tif err := ctx.Err(); err != nil {\n\t\treturn stoppedRefusal(ctx, \"snapshot restore\", err)\n\t}",
		New:  "\tif err := ctx.Err(); err != nil && false {\n\t\treturn stoppedRefusal(ctx, \"snapshot restore\", err)\n\t}",
		Tests: [][]string{
			{"./ha", "-run", "TestRestoreStoppedBeforeItsStop$"},
		},
	},
	{
		Name: "restore-stopped-after-its-stop-replaces-the-data",
		File: "ha/snapshot.go",
		Old:  "\tif err := ctx.Err(); err != nil {\n\t\t// Stopped (Ctrl-C) during the stop, which finished",
		New:  "\tif err := ctx.Err(); err != nil && false {\n\t\t// Stopped (Ctrl-C) during the stop, which finished",
		Tests: [][]string{
			{"./ha", "-run", "TestRestoreStoppedBeforeItsStop$"},
		},
	},
	{
		Name: "supervised-start-waits-silently",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "\treturn sayWhile(s.progress, cmp.Or(s.every, ha.WaitReportEvery), func(",
		New:  "\treturn do()\n\treturn sayWhile(s.progress, cmp.Or(s.every, ha.WaitReportEvery), func(",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestSupervisedStartsSayWhatTheyWaitFor$"},
		},
	},
	{
		Name: "upgrade-wait-stopped-said-as-its-timeout",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "\t\t\tif parent.Err() != nil {\n\t\t\t\treturn fmt.Errorf(\"upgrade stopped while it waited for the supervisor",
		New:  "\t\t\tif parent.Err() != nil && false {\n\t\t\t\treturn fmt.Errorf(\"upgrade stopped while it waited for the supervisor",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpgradeWaitStoppedSaysSo$"},
		},
	},
	{
		Name: "an-answer-that-is-no-grpc-taken-for-a-refusal",
		File: "ha/etcd.go",
		Old:  " ||\n\t\tstrings.Contains(err.Error(), notGRPCAnswer)\n}",
		New:  "\n}",
		Tests: [][]string{
			{"./ha", "-run", "TestAnAnswerThatIsNoGRPCIsUnreachable$"},
		},
	},
	{
		Name: "restore-stopped-in-its-start-leaves-no-cluster-id",
		File: "ha/etcd_start.go",
		Old:  "\tif st.Etcd.ClusterID == \"\" && st.Etcd.InitialClusterState == \"new\" {\n\t\tn.recordClusterID(ctx, st)\n\t}",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "TestRestoreStoppedBeforeItsStop$"},
		},
	},
	{
		Name: "member-remove-unread-members-exit-1",
		File: "cmd/stratum/cli/member.go",
		Old:  "\t\t\t\treturn refusedf(\"etcd member remove: %w; nothing was removed: run it on a control plane whose etcd runs\", err)",
		New:  "\t\t\t\treturn err",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestEtcdMemberRemove$"},
		},
	},
	{
		Name: "second-interrupt-cuts-a-hold-short",
		File: "cmd/stratum/main.go",
		Old:  "if s == syscall.SIGHUP || interrupt.Held() {",
		New:  "if s == syscall.SIGHUP {",
		Tests: [][]string{
			{"./cmd/stratum", "-run", "TestSecondInterruptEndsTheProcess$"},
		},
	},
	{
		Name: "downgrade-stopped-after-validate-is-a-failure",
		File: "ha/downgrade.go",
		Old:  "\tif ctx.Err() != nil {\n\t\treturn stoppedRefusal(ctx, \"etcd downgrade to \"+target, ctx.Err())\n\t}\n",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "TestDowngradeStoppedAfterItsValidation$"},
		},
	},
	{
		Name: "upgrade-unread-check-exits-1",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "\t\tdefault:\n\t\t\treturn upgradeRefusedf(\"%w\", err)\n",
		New:  "\t\tdefault:\n\t\t\treturn err\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpgradeRefusesWhatItCouldNotDoBeforeItsRestart$"},
		},
	},
	{
		Name: "upgrade-snapshot-failure-exits-1",
		File: "cmd/stratum/cli/upgrade.go",
		Old:  "return refusedf(\"upgrade refused: %w; the control plane was not touched",
		New:  "return fmt.Errorf(\"upgrade refused: %w; the control plane was not touched",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpgradeRefusesWhatItCouldNotDoBeforeItsRestart$"},
		},
	},
	{
		Name: "data-journal-rewrite-failure-removes-the-earlier-one",
		File: "ha/datajournal.go",
		Old:  "\tcase earlier:\n",
		New:  "\tcase earlier && false:\n",
		Tests: [][]string{
			{"./ha", "-run", "TestDataReplaceJournalOfAnEarlierRunStays$"},
		},
	},
	{
		Name: "reset-that-started-its-etcd-refuses-as-unchanged",
		File: "ha/reset.go",
		Old:  "\t\trefusedAfter = startedEtcdForReset\n",
		New:  "",
		Tests: [][]string{
			{"./ha", "-run", "TestResetThatStartedItsEtcdSaysSo$"},
		},
	},
	{
		Name: "first-start-keeps-a-stale-initial-cluster",
		File: "ha/etcd_start.go",
		Old:  "\tif sameMemberSet(now, st.Etcd.InitialCluster) {\n",
		New:  "\tif sameMemberSet(now, st.Etcd.InitialCluster) || true {\n",
		Tests: [][]string{
			{"./ha", "-run", "TestNewMemberStartsAfterAnotherLeft$"},
		},
	},
	{
		Name: "join-ignores-its-grant-retired-midway",
		File: "ha/join.go",
		Old:  "\tif !r.resumed {\n\t\tif err := r.bundleAsDownloaded(ctx, cs, id); err != nil {",
		New:  "\tif false {\n\t\tif err := r.bundleAsDownloaded(ctx, cs, id); err != nil {",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusedWhenItsGrantIsRetiredMidway$"},
		},
	},
	{
		Name: "quota-rerun-silent-over-a-stopped-etcd",
		File: "ha/etcd_space.go",
		Old:  "\t\tif !runs && n.env.Progress != nil {\n",
		New:  "\t\tif false {\n",
		Tests: [][]string{
			{"./ha", "-run", "TestSetEtcdQuotaWhoseRestartFailedSaysEtcdIsStopped$"},
		},
	},
	{
		Name: "renew-failed-etcd-restart-advises-a-rerun-alone",
		File: "ha/renew.go",
		Old:  "Then, here: `stratum up` if etcd is stopped (it starts on the renewed files), and `stratum certs renew` again",
		New:  "Then re-run it here",
		Tests: [][]string{
			{"./ha", "-run", "TestRenewWhoseRestartFailedSaysEtcdMayBeStopped$"},
		},
	},
	{
		Name: "install-now-failed-start-hides-the-stopped-control-plane",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "\to.stoppedHere = true // its services with it: down until the unit starts\n",
		New:  "",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoffStartPastItsBound$"},
		},
	},
	{
		Name: "retries-stopped-exit-3",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "\treturn ha.Midway(fmt.Errorf(\"%w; and the supervisor was stopped while it retried its start",
		New:  "\treturn (fmt.Errorf(\"%w; and the supervisor was stopped while it retried its start",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestRetriesStoppedIsNoRefusal$"},
		},
	},
	{
		Name: "reset-refusal-hides-an-unfinished-reset",
		File: "ha/reset.go",
		Old:  "\tif rep.Unfinished {\n",
		New:  "\tif false {\n",
		Tests: [][]string{
			{"./ha", "-run", "TestResetThatStartedItsEtcdSaysSo$"},
		},
	},
	{
		Name: "join-rollback-unsaid",
		File: "ha/join.go",
		Old:  "\treturn fmt.Sprintf(\"; %s was removed again (rolled back): %s\", member, joinHint)",
		New:  "\treturn \"\"",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinFailureAfterItsAddSaysWhatBecameOfTheMember$"},
		},
	},
	{
		Name: "rejoin-wipe-stop-failure-hides-the-stopped-control-plane",
		File: "ha/rejoin.go",
		Old:  "\tcase slices.Contains(ran, rejoinStop):\n",
		New:  "\tcase false:\n",
		Tests: [][]string{
			{"./ha", "-run", "TestRejoinWipeWhoseStopFailsAfterTheStopStepSaysItIsStopped$"},
		},
	},
	{
		Name: "lock-refuses-a-yielding-holder",
		File: "internal/nodelock/nodelock.go",
		Old:  "\t\tif strings.Contains(locked.Holder, YieldMark) {\n",
		New:  "\t\tif false && strings.Contains(locked.Holder, YieldMark) {\n",
		Tests: [][]string{
			{"./internal/nodelock", "-run", "TestAHolderThatYieldsIsWaitedFor$"},
			{"./ha", "-run", "TestJoinRefusalsChangeNothing$"},
		},
	},
	{
		Name: "refused-join-keeps-the-firewall-open",
		File: "ha/join.go",
		Old:  "\t\tif err := c.Host.UntrustCIDR(p); err != nil {\n",
		New:  "\t\tif err := error(nil); p.IsValid() && err != nil {\n",
		Tests: [][]string{
			{"./ha", "-run", "TestJoinRefusalsChangeNothing$"},
		},
	},
	{
		Name: "reset-keeps-the-firewall-open",
		File: "ha/reset.go",
		Old:  "\t\tif st, err := nodestate.Load(h); err == nil && st.PodCIDR != \"\" {\n",
		New:  "\t\tif st, err := nodestate.Load(h); err == nil && st.PodCIDR == \"-\" {\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestResetTakesAControlPlaneOut$"},
		},
	},
	{
		Name: "untrust-deletes-without-checking",
		File: "internal/host/local.go",
		Old:  "\t\t\t}](err); ok && ec.ExitCode() == 1 {\n\t\t\t\treturn nil\n",
		New:  "\t\t\t}](err); ok && ec.ExitCode() == 99 {\n\t\t\t\treturn nil\n",
		Tests: [][]string{
			{"./internal/host", "-run", "TestUntrustCIDRDeletesOnlyWhatIsThere$"},
		},
	},
	{
		Name: "in-process-service-context-outlives-its-run",
		File: "internal/supervisor/supervisor.go",
		Old:  "\t\t\tdefer cancel()\n\t\t\tch <- runRecovered(rctx, u.spec.Name, u.spec.Run)\n",
		New:  "\t\t\tch <- runRecovered(rctx, u.spec.Name, u.spec.Run)\n",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestAnInProcessServiceThatKeepsFailingLeavesNothingBehind$"},
		},
	},
	{
		Name: "a-repeated-failure-warned-every-time",
		File: "internal/quietlog/quietlog.go",
		Old:  "\tif text := msg + \": \" + err.Error(); text != r.said {\n",
		New:  "\tif text := msg + \": \" + err.Error(); text != r.said || true {\n",
		Tests: [][]string{
			{"./internal/quietlog", "-run", "TestARepeatIsSaidOnce$"},
			{"./internal/supervisor", "-run", "TestAnInProcessServiceThatKeepsFailingLeavesNothingBehind$"},
		},
	},
	{
		Name: "leaf-issued-past-its-ca",
		File: "internal/pki/pki.go",
		Old:  "\tif !now.Before(ca.Cert.NotAfter) {\n",
		New:  "\tif false {\n",
		Tests: [][]string{
			{"./internal/pki", "-run", "TestIssueStopsAtCAExpiry$"},
		},
	},
	{
		Name: "control-socket-waits-for-a-silent-caller",
		File: "internal/supervisor/socket.go",
		Old:  "\t_ = c.SetReadDeadline(time.Now().Add(requestWithin))\n",
		New:  "",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestASilentOrEndlessCallerIsLetGo$", "-timeout", "60s"},
		},
	},
	{
		Name: "lock-wait-ignores-a-stop",
		File: "internal/nodelock/nodelock.go",
		Old:  "\t\t\tstop = o.until.Done()\n",
		New:  "\t\t\t_ = o.until.Done()\n",
		Tests: [][]string{
			{"./internal/nodelock", "-run", "TestAHolderThatYieldsIsWaitedFor$"},
		},
	},
	{
		Name: "refused-join-untrusts-what-it-never-trusted",
		File: "ha/join.go",
		Old:  "\tif err == nil {\n\t\tc.mu.Lock()\n\t\tc.trusted = append(c.trusted, cidr)",
		New:  "\tif true {\n\t\tc.mu.Lock()\n\t\tc.trusted = append(c.trusted, cidr)",
		Tests: [][]string{
			{"./ha", "-run", "TestARefusedJoinTakesBackOnlyTheTrustItGave$"},
		},
	},
	{
		Name: "etcd-error-matched-by-a-longer-description",
		File: "ha/etcd.go",
		Old:  "\t\treturn ee.Error() == desc\n",
		New:  "\t\treturn strings.Contains(ee.Error(), desc)\n",
		Tests: [][]string{
			{"./ha", "-run", "TestEtcdErrIsTakesNoLongerDescription$|TestPromoteWaitsForALearnerBehind$"},
		},
	},
	{
		Name: "certs-check-ignores-a-certificate-not-valid-yet",
		File: "cmd/stratum/cli/certs.go",
		Old:  ", NotYetValid: now.Before(crt.NotBefore)})",
		New:  ", NotYetValid: false})",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestCertsCheckAndRenew$"},
		},
	},
	{
		Name: "service-status-without-its-run-start",
		File: "internal/supervisor/supervisor.go",
		Old:  "\t\tst.Running, st.Since = true, u.since\n\t\tst.Detail = fmt.Sprintf(\"running (pid %d)",
		New:  "\t\tst.Running = true\n\t\tst.Detail = fmt.Sprintf(\"running (pid %d)",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestARestartIsANewSince$"},
		},
	},
	{
		Name: "in-process-service-status-without-its-run-start",
		File: "internal/supervisor/supervisor.go",
		Old:  "\t\tst.Running, st.Since = true, u.since\n\t\tst.Detail = \"running since \"",
		New:  "\t\tst.Running = true\n\t\tst.Detail = \"running since \"",
		Tests: [][]string{
			{"./internal/supervisor", "-run", "TestARestartIsANewSince$"},
		},
	},
	{
		Name: "release-member-read-again-only-at-renewal",
		File: "cmd/stratum/cli/supervise.go",
		Old:  " || etcd.Since.IsZero() || !etcd.Since.Equal(idRead) {",
		New:  " || etcd.Since.IsZero() {",
		Tests: [][]string{
			{"./e2e", "-run", "TestHAControlPlaneOnThreeHosts"},
		},
	},
	{
		Name: "voter-count-asked-of-a-quorum",
		File: "ha/membership.go",
		Old:  "cli.MemberList(rctx, clientv3.WithSerializable())",
		New:  "cli.MemberList(rctx)",
		Tests: [][]string{
			{"./ha", "-run", "TestOtherVotersCountWithoutAQuorum$"},
		},
	},
	{
		Name: "etcd-stopping-taken-for-an-answer",
		File: "ha/etcd.go",
		Old:  "if errors.As(err, &ee) && ee.Code() == codes.Unavailable {",
		New:  "if false && errors.As(err, &ee) && ee.Code() == codes.Unavailable {",
		Tests: [][]string{
			{"./ha", "-run", "TestEveryEtcdUnavailableIsUnreachable$"},
		},
	},
	{
		Name: "member-list-stops-at-another-cluster",
		File: "ha/etcd.go",
		Old:  "if ctx.Err() == nil && errors.Is(err, errOtherCluster) {",
		New:  "if false && ctx.Err() == nil && errors.Is(err, errOtherCluster) {",
		Tests: [][]string{
			{"./ha", "-run", "TestMembersOfPassesOverAnotherCluster$"},
		},
	},
	{
		Name: "vip-of-no-single-host-accepted",
		File: "ha/bootstrap.go",
		Old:  "\tcase ip.IsUnspecified(), ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}), ip.IsMulticast():\n",
		New:  "\tcase false:\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestRejoinRepointSnapshotUsageAndRefusals$"},
		},
	},
	{
		Name: "snapshot-destination-judged-after-the-dump",
		File: "cmd/stratum/cli/snapshot.go",
		Old:  "\t\t\tif err := checkWritableFile(args[0]); err != nil {",
		New:  "\t\t\tif err := checkWritableFile(args[0]); false && err != nil {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestReportsAndDryRunsChangeNothing$"},
		},
	},
	{
		Name: "up-takes-a-changed-network-silently",
		File: "ha/bootstrap.go",
		Old:  "\tif err := refuseChangedOptions(saved, o); err != nil {\n",
		New:  "\tif err := refuseChangedOptions(saved, o); false && err != nil {\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUpFromAConfigFile$"},
		},
	},
	{
		Name: "up-network-flags-judged-late",
		File: "cmd/stratum/cli/node.go",
		Old:  "\t\t\tif err := checkUpNetwork(f); err != nil {\n",
		New:  "\t\t\tif err := checkUpNetwork(f); false && err != nil {\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUsageErrorsExit2$"},
		},
	},
	{
		Name: "join-server-without-its-port",
		File: "ha/join.go",
		Old:  `u.Hostname() != "" && u.Port() != "" &&`,
		New:  `u.Hostname() != "" &&`,
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestServerRefusesMalformedFlagsChangingNothing$"},
		},
	},
	{
		Name: "token-deleted-twice",
		File: "cmd/stratum/cli/tokens.go",
		Old:  "\t\t\tids = unique\n",
		New:  "\t\t\t_ = unique\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestTokenListAndDelete$"},
		},
	},
	{
		Name: "help-of-nothing-exits-0",
		File: "cmd/stratum/cli/cli.go",
		Old:  "\troot.SetHelpCommand(helpCmd(root))\n",
		New:  "",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUsageErrorsExit2$"},
		},
	},
	{
		Name: "completion-of-no-shell-exits-0",
		File: "cmd/stratum/cli/cli.go",
		Old:  "\t\tc.Args, c.RunE = cobra.ArbitraryArgs, groupRun\n",
		New:  "",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestUsageErrorsExit2$"},
		},
	},
	{
		Name: "install-gate-that-cannot-tell-exits-1",
		File: "cmd/stratum/cli/handoff.go",
		Old:  "\t\treturn refused(fmt.Errorf(\"install --now: %w; nothing was written or changed\", err))\n",
		New:  "\t\treturn fmt.Errorf(\"install --now: %w; nothing was written or changed\", err)\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestHandoffJudgesTheSupervisor$"},
		},
	},
	{
		Name: "unit-in-a-directory-systemd-ignores-unsaid",
		File: "cmd/stratum/cli/services.go",
		Old:  "if dir := filepath.Clean(unitDir); !slices.Contains(systemdUnitDirs, dir) {",
		New:  "if dir := filepath.Clean(unitDir); false && !slices.Contains(systemdUnitDirs, dir) {",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestInstallWritesAUnitThatRunsUpOnlyWithState$"},
		},
	},
	{
		Name: "status-waits-for-a-silent-supervisor",
		File: "cmd/stratum/cli/services.go",
		Old:  "\t\tsctx, cancel := context.WithTimeout(ctx, statusAskWithin)\n",
		New:  "\t\tsctx, cancel := context.WithCancel(ctx)\n",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestStatusOfASupervisorThatDoesNotAnswer$"},
		},
	},
	{
		Name: "promotion-names-its-default-bound",
		File: "ha/membership.go",
		Old:  "catch up within %s (last refusal: %v); it is still a learner: check that its etcd runs and reaches the leader: %w\", op, time.Since(start).Round(time.Second),",
		New:  "catch up within %s (last refusal: %v); it is still a learner: check that its etcd runs and reaches the leader: %w\", op, promoteRetryFor,",
		Tests: [][]string{
			{"./ha", "-run", "TestPromoteWaitsForALearnerBehind$"},
		},
	},
	{
		Name: "lock-wait-said-only-once",
		File: "internal/nodelock/nodelock.go",
		Old:  "\t\t\tcase now.Sub(saidAt) >= WaitSaidEvery:\n",
		New:  "\t\t\tcase false && now.Sub(saidAt) >= WaitSaidEvery:\n",
		Tests: [][]string{
			{"./internal/nodelock", "-run", "TestAHolderThatYieldsIsWaitedFor$"},
		},
	},
	{
		Name: "start-silent-until-ready",
		File: "cmd/stratum/cli/supervise.go",
		Old:  "\treturn sayWhile(func(line string) { fmt.Fprintf(p.w,",
		New:  "\treturn p.Supervisor.StartService(ctx, name)\n\treturn sayWhile(func(line string) { fmt.Fprintf(p.w,",
		Tests: [][]string{
			{"./cmd/stratum/cli", "-run", "TestAStartSaysWhatItWaitsForUntilReady$"},
		},
	},
	{
		Name: "downgrade-wait-says-not-how-it-ended",
		File: "ha/downgrade.go",
		Old:  "\t\t\twaited := \"stopped while waiting\"\n\t\t\tif errors.Is(ctx.Err(), context.DeadlineExceeded) {",
		New:  "\t\t\twaited := \"\"\n\t\t\tif false && errors.Is(ctx.Err(), context.DeadlineExceeded) {",
		Tests: [][]string{
			{"./ha", "-run", "TestDowngradeWaitSaysHowItEnded$"},
		},
	},
}
