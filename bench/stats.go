package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// sample is one figure measured once per round; the report shows its median
// and its min–max across rounds.
type sample []float64

func (s sample) sorted() []float64 {
	c := append([]float64(nil), s...)
	sort.Float64s(c)
	return c
}

func (s sample) median() float64 {
	c := s.sorted()
	if len(c) == 0 {
		return math.NaN()
	}
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func (s sample) min() float64 { c := s.sorted(); return c[0] }
func (s sample) max() float64 { c := s.sorted(); return c[len(c)-1] }

// rate formats a per-second figure as "median (min–max)".
func (s sample) rate() string {
	if len(s) == 0 {
		return "–"
	}
	if len(s) == 1 {
		return num(s[0])
	}
	return fmt.Sprintf("%s (%s–%s)", num(s.median()), num(s.min()), num(s.max()))
}

// plain formats a median alone, "–" when empty.
func (s sample) plain() string {
	if len(s) == 0 {
		return "–"
	}
	if s.median() < 10 {
		return fmt.Sprintf("%.2f", s.median())
	}
	return num(s.median())
}

// plainMedian is a rate's median alone.
func (s sample) plainMedian() string {
	if len(s) == 0 {
		return "–"
	}
	return num(s.median())
}

// ratio formats a ratio sample the same way, as "0.83× (0.80–0.91)".
func (s sample) ratio() string {
	if len(s) == 0 {
		return "–"
	}
	if len(s) == 1 {
		return fmt.Sprintf("%.2f×", s[0])
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", s.median(), s.min(), s.max())
}

// num writes a rate with thousands separators and no decimals above 100.
func num(f float64) string {
	if math.IsNaN(f) {
		return "–"
	}
	if f < 100 {
		return fmt.Sprintf("%.1f", f)
	}
	n := int64(math.Round(f))
	s := fmt.Sprint(n)
	out := ""
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			out += ","
		}
		out += string(r)
	}
	return out
}

// latencies collects durations and reports quantiles.
type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	c := append(latencies(nil), l...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	i := int(math.Ceil(q*float64(len(c)))) - 1
	if i < 0 {
		i = 0
	}
	return c[i]
}

// ms formats a duration in milliseconds with enough digits.
func ms(d time.Duration) string {
	f := float64(d) / float64(time.Millisecond)
	switch {
	case f < 1:
		return fmt.Sprintf("%.3f ms", f)
	case f < 100:
		return fmt.Sprintf("%.1f ms", f)
	default:
		return fmt.Sprintf("%.0f ms", f)
	}
}

// rotated is order starting at its round-th member (modulo its length), so
// that the contender who goes first changes from round to round and a slow
// spell of the machine does not fall on one contender.
func rotated[T any](order []T, round int) []T {
	out := make([]T, 0, len(order))
	for i := range order {
		out = append(out, order[(i+round)%len(order)])
	}
	return out
}
