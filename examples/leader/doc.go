// Leader election: three scheduler nodes campaign for "leader:scheduler".
// The lease's fence is the leader's epoch, and the downstream resource (a
// pump controller's row) refuses commands that carry an older epoch than the
// newest it has accepted. The first leader is then cut off — we hold its
// database connections, so that it can neither renew nor write: a freeze or a
// partition — and its lease expires. Another node takes over with a higher
// epoch. When the old leader comes back, it still believes it leads and
// sends one more command: the downstream refuses it.
//
//	go run ./examples/leader
package main
