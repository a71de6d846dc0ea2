package ha

// ClusterVerdict exposes EtcdClusterHealthy's judgement of the members'
// answers to the external tests, which cannot otherwise stage every
// combination of answers (two leaders at once) on a live cluster.
var ClusterVerdict = clusterVerdict
