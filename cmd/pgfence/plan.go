package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/pgfence/pgfence/internal/keepalive"
	"github.com/pgfence/pgfence/internal/validate"
)

const planUsage = `Usage: pgfence plan --ttl 30s [--renew 10s] [--freeze 45s] [--margin 3s]

Sizes a lease (pure computation, no database): the worst-case freeze the
lease absorbs (TTL - renew interval: the holder freezes just as a renewal
falls due), how many renewals may fail in a row, how long a crashed holder
blocks the key, and for a longer freeze the stale window: how long another
worker may hold the key while the frozen one still believes it does. Only the
fence checked at the resource protects writes in that window.

Warns when the renew interval is too close to the TTL.
`

// planResult is the sizing of one lease configuration.
type planResult struct {
	TTL, Renew, Margin time.Duration
	Absorbed           time.Duration // worst case: freeze starts when a renewal falls due
	FailuresTolerated  int           // scheduled renewals that may fail in a row
	Freeze             time.Duration
	StaleWorst         time.Duration // freeze - absorbed, if positive
	StaleBest          time.Duration // freeze - TTL, if positive
	Warnings           []string
}

// plan computes the sizing; ttl and renew must satisfy 0 < renew < ttl.
func plan(ttl, renew, margin, freeze time.Duration) planResult {
	p := planResult{TTL: ttl, Renew: renew, Margin: margin, Freeze: freeze}
	p.Absorbed = ttl - renew
	// Renewals fall due at R, 2R, ...; those strictly before the holder's
	// local deadline (TTL - margin) count, since at that deadline it stops
	// itself, and the last of them must succeed.
	attempts := int((ttl - margin - 1) / renew)
	p.FailuresTolerated = max(attempts-1, 0)
	if freeze > p.Absorbed {
		p.StaleWorst = freeze - p.Absorbed
	}
	if freeze > ttl {
		p.StaleBest = freeze - ttl
	}
	if p.FailuresTolerated == 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"renewing every %v with a %v TTL tolerates no failed renewal: one slow round trip loses the lease of a healthy holder. Renew at most every %v (TTL/3) to tolerate one.",
			renew, ttl, ttl/3))
	}
	if margin > 0 && renew >= ttl-margin {
		p.Warnings = append(p.Warnings, fmt.Sprintf(
			"the renew interval %v is not shorter than the TTL minus the client's safety margin (%v - %v = %v): the holder's local deadline passes before its first renewal, and it stops itself every time.",
			renew, ttl, margin, ttl-margin))
	}
	return p
}

func (a *app) cmdPlan(args []string) error {
	var ttl, renew, freeze, margin time.Duration
	fs := a.newFlags("plan", planUsage, nil)
	durVar(fs, &ttl, "ttl", 0, "lease length, a `duration` such as 30s (required)")
	durVar(fs, &renew, "renew", 0, "renew interval, a `duration` (default: a third of --ttl, as pglease and exec do)")
	durVar(fs, &freeze, "freeze", 0, "a freeze (GC pause, VM stall, partition) to evaluate, a `duration`")
	durVar(fs, &margin, "margin", 0, "the client's safety margin, a `duration` (default: a tenth of --ttl, as pglease does)")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fail(exitUsage, "pgfence plan: unexpected argument %q", pos[0])
	}
	if ttl == 0 {
		return fail(exitUsage, "pgfence plan: --ttl is required, e.g. pgfence plan --ttl 30s --renew 10s")
	}
	if ttl < validate.MinTTL || ttl > validate.MaxTTL {
		return fail(exitUsage, "pgfence plan: --ttl %v is outside [%v, %v]", ttl, validate.MinTTL, validate.MaxTTL)
	}
	// pglease's defaults for whatever was not given: one Schedule for both.
	s := keepalive.Schedule{TTL: ttl, Margin: margin, Every: renew}
	renew, margin = s.Interval(), s.SafetyMargin()
	if renew >= ttl {
		return fail(exitUsage, "pgfence plan: --renew %v must be shorter than --ttl %v: the lease would expire before it is renewed (pglease refuses this)", renew, ttl)
	}
	if margin >= ttl {
		return fail(exitUsage, "pgfence plan: --margin %v must be shorter than --ttl %v", margin, ttl)
	}
	p := plan(ttl, renew, margin, freeze)
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lease TTL\t%v\n", p.TTL)
	fmt.Fprintf(tw, "renew interval\t%v\t(%.1f renewals per minute per held lease)\n", p.Renew, float64(time.Minute)/float64(p.Renew))
	fmt.Fprintf(tw, "worst-case freeze absorbed\t%v\t(TTL - renew interval: the holder freezes just as a renewal falls due)\n", p.Absorbed)
	fmt.Fprintf(tw, "best-case freeze absorbed\t%v\t(the freeze starts right after a renewal)\n", p.TTL)
	fmt.Fprintf(tw, "renewals that may fail in a row\t%d\t(of the renewals due every %v before the holder's local deadline; pglease retries a failed one sooner)\n", p.FailuresTolerated, p.Renew)
	fmt.Fprintf(tw, "holder's local deadline\t%v\t(TTL - safety margin %v: the holder stops itself this long after its last successful renewal was sent)\n", p.TTL-p.Margin, p.Margin)
	fmt.Fprintf(tw, "key blocked after a crash\tup to %v\t(until the TTL runs out by the database clock)\n", p.TTL)
	if freeze > 0 {
		if p.StaleWorst == 0 {
			fmt.Fprintf(tw, "freeze of %v\tabsorbed\t(the lease outlives it even in the worst case)\n", freeze)
		} else {
			fmt.Fprintf(tw, "freeze of %v: stale window\t%v worst case, %v best case\t(another worker may hold the key while the frozen one still believes it does; only the fence at the resource refuses its writes)\n",
				freeze, p.StaleWorst, p.StaleBest)
		}
	}
	tw.Flush()
	for _, w := range p.Warnings {
		fmt.Fprintf(a.stdout, "WARNING: %s\n", w)
	}
	return nil
}
