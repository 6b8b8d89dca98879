"""A non-Go client of pgfence's SQL contract, for the interop tests.

  holder.py DSN contend KEYS SECONDS   take, write under and release leases
                                       on the keys until SECONDS pass; print
                                       "grants N writes N refused N"
  holder.py DSN take KIND KEY [N]      take KEY once in KIND (plain, shared,
                                       or permit of N), keep it 30 s or
                                       until stdin closes; print "granted
                                       SLOT FENCE", "held" or "error
                                       SQLSTATE"
  holder.py DSN frozen KEY TTL         take the lease on KEY, print
                                       "fence F", work 0.5 s, then write
                                       under the fence; print "written" or
                                       "refused"

Works with psycopg 3 or psycopg2, in autocommit: each lease call is a
transaction of its own, as the contract requires.
"""
import random
import sys
import time

try:
    import psycopg

    def connect(dsn):
        return psycopg.connect(dsn, autocommit=True)
except ImportError:
    import psycopg2

    def connect(dsn):
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        return conn


def acquire(cur, key, ttl):
    cur.execute("SELECT fence FROM pgfence_acquire(%s, %s::interval, 'python')", (key, ttl))
    row = cur.fetchone()
    return row[0] if row else None


def guarded_write(cur, key, fence):
    # The guarded-write predicate: only a fence at least as new as the
    # row's counts.
    cur.execute("UPDATE resource SET last_fence = %s, writes = writes + 1, last_writer = 'python' "
                "WHERE key = %s AND last_fence <= %s", (fence, key, fence))
    return cur.rowcount == 1


def contend(dsn, keys, seconds):
    conn = connect(dsn)
    cur = conn.cursor()
    grants = writes = refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        key = random.choice(keys)
        fence = acquire(cur, key, "2 s")
        if fence is None:
            time.sleep(random.uniform(0, 0.01))
            continue
        grants += 1
        if guarded_write(cur, key, fence):
            writes += 1
        else:
            refused += 1
        cur.execute("SELECT released FROM pgfence_release(%s, %s)", (key, fence))
    print("grants %d writes %d refused %d" % (grants, writes, refused), flush=True)


TAKE = {
    "plain": ("SELECT 0, fence FROM pgfence_acquire(%s, '30 s', 'python')", 1),
    "shared": ("SELECT slot, fence FROM pgfence_acquire_shared(%s, false, '30 s', 'python')", 1),
    "permit": ("SELECT slot, fence FROM pgfence_acquire_permit(%s, %s, '30 s', 'python')", 2),
}


def take(dsn, kind, key, n):
    conn = connect(dsn)
    cur = conn.cursor()
    sql, nargs = TAKE[kind]
    try:
        cur.execute(sql, (key, int(n)) if nargs == 2 else (key,))
    except Exception as e:  # the SQLSTATE is the answer
        code = getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)
        print("error %s" % code, flush=True)
        return
    row = cur.fetchone()
    if row is None:
        print("held", flush=True)
        return
    print("granted %d %d" % (row[0], row[1]), flush=True)
    sys.stdin.read()  # hold it until the test closes stdin
    cur.execute("SELECT released FROM pgfence_release(%s, %s)", (key, row[1]))


def frozen(dsn, key, ttl):
    conn = connect(dsn)
    cur = conn.cursor()
    fence = acquire(cur, key, ttl)
    if fence is None:
        print("held", flush=True)
        return
    print("fence %d" % fence, flush=True)
    time.sleep(0.5)  # the test stops this process here, past the TTL
    print("written" if guarded_write(cur, key, fence) else "refused", flush=True)


if __name__ == "__main__":
    dsn, mode = sys.argv[1], sys.argv[2]
    if mode == "contend":
        contend(dsn, sys.argv[3].split(","), float(sys.argv[4]))
    elif mode == "take":
        take(dsn, sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else "0")
    elif mode == "frozen":
        frozen(dsn, sys.argv[3], sys.argv[4])
    else:
        sys.exit("unknown mode " + mode)
