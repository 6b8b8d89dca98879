// Package listen is pgfence's one LISTEN client: pglease's wake-on-release
// and claim's Runner (WithListen) both use it.
//
// A Listener owns one dedicated connection, LISTENs on every channel anyone
// subscribed to, and fans each notification out to the subscribers of its
// channel (optionally only those that asked for its payload). Run keeps the
// connection: after a failure it reconnects with jittered exponential
// backoff, and every successful LISTEN wakes the subscribers of the channels
// it covers, because notifications sent while nobody listened are lost.
//
// # A wake-up means "check again"
//
// A subscriber hands Subscribe a channel of its own and receives empty
// values on it: a wake-up says "what you wait for may have changed; read
// it". A notification wakes the subscribers of its channel (and payload); a
// (re)connection, or a LISTEN on a channel subscribed while connected, wakes
// every subscriber it concerns, since what happened before it went unheard.
// Sends never block: a subscriber whose channel is full already has a
// wake-up pending and needs no second one. So the connection never waits
// for a slow subscriber, and wake-ups coalesce. Both users keep polling as
// the fallback: a lost notification (the listener down, a half-open
// connection not yet noticed) costs one poll interval, not correctness.
//
// # The connection
//
// The listener takes a connection from the caller's pgxpool.Pool and keeps
// it (Hijack), rather than dialling one from the pool's ConnConfig: the
// pool's own BeforeConnect and AfterConnect hooks (rotating credentials,
// session settings) then apply to it too, and it goes wherever the pool
// goes. The pool opens a replacement as it needs one. The price is that the
// first Acquire waits like any other when the pool is saturated. Channels
// stay LISTENed for the life of the connection once subscribed (a LISTEN
// costs the server nothing while no one notifies).
//
// Every wait for a notification is bounded by a ping interval; when it
// passes quietly, the listener repeats its LISTEN (a no-op for the server)
// to check that the connection is alive, so a half-open TCP connection
// keeps it deaf for one interval, not until the kernel gives up. Repeating
// LISTEN rather than pinging keeps pg_stat_activity showing the backend's
// query as the LISTEN, which is how operators (and the tests) find it.
//
// # Behind PgBouncer
//
// LISTEN needs a server session of its own. Through a transaction or
// statement pooler (PgBouncer's usual pool modes) a LISTEN takes effect on
// whichever server session ran it, which goes back to the pool and keeps
// listening: its notifications go to whatever client it serves next, or
// are dropped ("got packet 'A' from server when not linked"), never to this
// listener, and it listens on after every pgfence client closed. So before
// its first LISTEN, Run checks its connection (pgdb.DetectPooling): behind
// a transaction pooler it sends none, calls Config.OnPooled, closes the
// connection and returns, and its subscribers get their wake-ups from
// polling alone. A session pooler keeps a server session per client
// connection, and LISTEN works through it. pglease and claim let the
// application give the listener a pool of its own (a listen pool, given to
// WithWakeOnRelease or WithListen) that
// reaches PostgreSQL directly.
package listen
