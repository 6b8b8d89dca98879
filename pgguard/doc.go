// Package pgguard is the resource's half of fencing: it makes writes from a
// stale lock holder fail, atomically with the write, in PostgreSQL.
//
// A lease (package pglease) decides who may try; it cannot stop a holder
// that was paused past its lease from writing late. Each grant carries a
// fence, larger than every fence before it. pgguard takes that fence, an
// int64 from any source (a lease, a claimed job row, a leader's epoch), and
// makes the protected row refuse writes carrying an older fence than the
// newest it has accepted. The lock decides who may try; the resource decides
// which writes count.
//
// # Guarded writes
//
// A [Guard] ([NewGuard]) names one of your tables, its key column and its
// fence column (bigint NOT NULL DEFAULT 0; AddFenceColumn or
// FenceColumnMigration add it). [Guard.Update] is one statement:
//
//	UPDATE t SET ..., last_fence = $fence
//	 WHERE key = $key AND last_fence <= $fence AND <preconditions>
//
// "<=" lets a holder write several times with one fence; a newer fence locks
// older ones out. Preconditions (Eq, In, ...) make a transition legal only
// from the states it starts from, so a repeated transition (SENT -> SENT)
// is stopped too: fencing orders holders, it is not a state machine.
//
// Names are checked against the catalog and quoted with pgx's identifier
// sanitising; values are always bound parameters. Names with quotes,
// semicolons, backslashes, control characters, comment markers or whitespace
// other than an inner space are refused outright, as are fences <= 0
// (ErrInvalidInput).
//
// Every function takes a fencedb.DBTX (a pool, a connection or a pgx.Tx;
// DBTX is a deprecated alias of it), so a guarded write runs in the caller's
// transaction.
//
// # Zero rows is an answer
//
// When a guarded write changes no row, pgguard re-reads it (with the next
// statement on the same DBTX, so inside the caller's transaction) and says
// why: a *StaleFenceError (errors.Is(err, ErrStaleFence)), carrying the
// presented and the current fence, when a newer holder has written; a
// *PreconditionError (ErrPrecondition, and ErrAlreadyDone when the work is
// in a final state) when the fence was good but the row's state was not; an
// error satisfying ErrNoRow when there is no such row. Stale wins: a stale
// holder is told it is stale whatever the row's state.
//
// # Claim first
//
// Fencing does not cancel work in flight: a stale write that reaches the row
// before the new holder's first write is accepted, because the row has
// nothing newer to compare with. [Guard.ClaimFirst] closes that window: as
// the first statement of the new holder's transaction it raises the row's
// fence and returns the state the holder inherits. From then on the stale
// write is refused wherever it lands. (Package claim is another thing: it
// claims job rows from a queue.)
//
// # Database-enforced fencing
//
// [InstallTrigger] (opt-in, per table, and on the tables that INHERITS from
// it) adds a trigger that refuses, with SQLSTATE PF001, any UPDATE or DELETE
// of a row whose transaction carries an older fence than the row's, whatever
// SQL issued it, even a hand-written statement that forgot the predicate.
// The transaction's fence is set by SetFence or RunFenced (and by a Guard's
// statements themselves), all through the SQL function
// pgfence_set_fence, which binds it to the transaction: the setting
// pgfence.fence holds '<fence>@<transaction id>', and the trigger accepts it
// only in that transaction. A pgfence.fence set any other way (a
// session-level SET, which would outlive its transaction and, on a pooled
// connection, vouch for other clients' transactions; a plain set_config) is
// refused in either mode with SQLSTATE PF003. A transaction without a fence
// is refused in Strict mode (SQLSTATE PF002) and let through in Lenient
// mode; either way the trigger owns the fence column: a fenced UPDATE stamps
// its fence on the row, and no UPDATE lowers the row's fence or raises it
// past the fence its transaction holds. Classify maps the trigger's errors
// to ErrStaleFence and ErrNoFence.
//
// # The fence ceiling
//
// A made-up fence far above anything issued (say 2^62), once written to a
// row, locks every real holder out of it. So pgfence_set_fence refuses
// (SQLSTATE PF004, ErrFenceAboveCeiling) a fence above the highest that
// pgfence's source has issued so far, pgfence_fence_ceiling(): the WAL
// timeline over the fence sequence's last value. Guard, SetFence and
// RunFenced all check it, in the statement that sets the fence; it costs
// nothing per row. If your fences come from a source of your own (an epoch,
// a term, another system's revision), pass WithOwnFenceSource.
//
// # Trust model
//
// Fencing protects the resource from holders that are late, not from roles
// that lie. The lease's fence is only as good as the code that passes it on;
// the binding and the ceiling stop mistakes (a leftover session setting, a
// corrupted or invented fence passed through pgguard), not a role with SQL
// access, which can write any value into pgfence.fence, bound form
// included, or stamp a fence column directly on a table without the
// trigger. The database's privileges are the boundary: give roles you do
// not trust no UPDATE or DELETE on fenced tables and no UPDATE on the
// sequence pgfence_fence_seq (setval would move the ceiling), and keep the
// trigger in Strict mode where every writer should be fenced. Only a table's
// owner can disable its trigger.
//
// # Counting stale writes
//
// Every stale write caught is counted by the OpenTelemetry counter, recorded
// by table in a [StaleTally] when one is given (WithStaleTally), and passed
// to a hook (WithStaleHook). A
// non-zero count is the mechanism doing its job: each is a holder that was
// paused or cut off past its lease.
//
// # Options
//
// Each function takes only the options that apply to it ([GuardOption],
// [RunFencedOption], [SetFenceOption]), so an option it would ignore does not
// compile: [WithDoneWhen] is for [NewGuard] alone, [WithStaleTally] and
// [WithStaleHook] for NewGuard and [RunFenced], [WithOwnFenceSource] for all
// three.
//
// # Side effects that know no fences
//
// A payment provider cannot check a fence: package
// [github.com/pgfence/pgfence/payouts] builds durable, fenced payout intents
// on a Guard.
//
// pgguard never imports pglease: the resource knows fences, not leases.
// Its tables and functions come from pgfence's migrations (package
// migrations, versions 2 and 4).
//
// Metrics: guarded writes by table and outcome, and stale refusals by table,
// are recorded as OpenTelemetry metrics through the API only, to
// WithMeterProvider or the global provider; the instruments are documented
// once, in the README's "Metrics" section
// (https://github.com/pgfence/pgfence#metrics).
package pgguard
