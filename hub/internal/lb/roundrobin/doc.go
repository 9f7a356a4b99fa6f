// Package roundrobin is the round-robin load balancer
// (docs/design/algorithms.md#round-robin): each decision takes the next
// cluster, in Snapshot.Clusters order, after the one the previous decision
// took, skipping the clusters the request excluded.
//
// It owns one atomic counter per Picker and nothing else: it reads no
// statistics. The caller creates one Picker per routing target (and throws it
// away when the target empties), so targets do not share a rotation. The
// rotation is over positions, which are stable only because the state store
// sorts Snapshot.Clusters by cluster id (Go map order would shuffle them on
// every snapshot).
package roundrobin
