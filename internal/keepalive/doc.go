// Package keepalive is the one definition of how pgfence keeps a lease alive
// on the client side, shared by pglease (leases) and claim (job leases):
//
//   - the local deadline: the time just before the acquire, claim or renew
//     was sent, on Go's monotonic clock, plus the TTL, minus a safety margin
//     (default a tenth of the TTL) for clock drift and the reply's trip.
//     Past it the holder counts the lease as lost, whatever the database
//     may still think (Schedule.Deadline, Schedule.Extend);
//   - the renew schedule: a renewal is due an interval (default a third of
//     the TTL) after the last success, and after a failure it is retried
//     after min(interval/4, MaxRetry), until the local deadline ends the
//     lease (Schedule.Next). The retry is short because a failed renewal
//     is usually a dropped connection or a failover that the next attempt
//     gets through: with the default interval the first failure leaves
//     over half the TTL before the local deadline, and retrying four times
//     per interval, at most every MaxRetry, gives a short outage several
//     attempts in that time without turning a long one into a stream of
//     statements (Keeper sends one statement per retry for all its items);
//   - the loss cause (Cause), whose String is the metrics attribute value.
//
// Keeper keeps many items of one schedule alive together (claim's Runner
// uses it for its running jobs): each item's local deadline is a timer, not
// a goroutine, and one goroutine (Run) collects the items due each round
// and renews them with ONE call, so one statement renews them all.
//
// pglease does not use Keeper, only the schedule and the cause. Its leases
// each have their own TTL, are renewed one statement each (there is no
// batched renew), can be renewed by hand (Lease.Renew, WithoutAutoRenew),
// and cost no goroutine and under 2 KiB while held: two timers per lease
// (deadline, next renewal) serve that better than rounds, which would
// either renew leases of different TTLs on one clock or send their
// statements one after another from one goroutine.
package keepalive
