// Package pglease grants leases on named keys from PostgreSQL, each grant
// with a fencing token.
//
// A lease is held by one owner at a time, for a TTL judged by the database's
// now() alone; acquire, renew and release are one statement each, run in
// their own short transaction. Every grant carries a fence larger than every
// fence granted before, which never repeats or goes backwards as long as
// grants commit durably and each promotion raises the WAL timeline. Renew
// never resurrects an expired lease and release never touches a newer
// holder's. A lease's Context ends, with a [LeaseLostError], when auto-renewal
// fails until the client's local deadline, which passes before the server's
// expiry. The lease cannot stop a paused holder from writing late: pass
// [Lease.Fence] with each protected write and let the resource refuse older
// fences (package pgguard).
package pglease
