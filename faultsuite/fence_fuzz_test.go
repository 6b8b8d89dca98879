package faultsuite

import (
	"io/fs"
	"math/big"
	"regexp"
	"strconv"
	"testing"

	"github.com/pgfence/pgfence/migrations"
)

// The fence arithmetic lives in SQL (migrations/000001: pgfence_next_fence
// returns (timeline << 44) | nextval(seq), with the sequence capped at
// 2^44-1 and the timeline below 2^19); no Go code computes fences. This
// target checks the arithmetic's invariants in Go, against a math/big
// reference, with the bounds read from the migration itself so the check
// follows the SQL: within the bounds, a fence is positive, fits in a
// bigint, decomposes back into its timeline and sequence value, and orders
// exactly as (timeline, sequence) does, so every fence of a promoted
// standby (higher timeline) is above every fence of the old primary. The
// test lives here, not in migrations, because that package's tests start a
// database per process and the fuzzer runs several.
func FuzzFenceArithmetic(f *testing.F) {
	shift, maxSeq, maxTLI := fenceBounds(f)
	f.Add(uint32(1), uint64(1), uint32(1), uint64(2))
	f.Add(uint32(1), maxSeq, uint32(2), uint64(1))
	f.Add(maxTLI, maxSeq, maxTLI, maxSeq-1)
	f.Add(uint32(2), uint64(34), uint32(1), uint64(105)) // the measured failover: sequence went back, timeline up
	f.Fuzz(func(t *testing.T, tli1 uint32, seq1 uint64, tli2 uint32, seq2 uint64) {
		tli1, tli2 = 1+tli1%maxTLI, 1+tli2%maxTLI
		seq1, seq2 = 1+seq1%maxSeq, 1+seq2%maxSeq
		f1, f2 := fence(tli1, seq1, shift), fence(tli2, seq2, shift)
		for _, c := range []struct {
			tli uint32
			seq uint64
			f   int64
		}{{tli1, seq1, f1}, {tli2, seq2, f2}} {
			ref := new(big.Int).Lsh(big.NewInt(int64(c.tli)), shift)
			ref.Add(ref, new(big.Int).SetUint64(c.seq))
			if !ref.IsInt64() || ref.Int64() != c.f || c.f <= 0 {
				t.Fatalf("fence(%d, %d) = %d, reference %s", c.tli, c.seq, c.f, ref)
			}
			if uint32(c.f>>shift) != c.tli || uint64(c.f)&(1<<shift-1) != c.seq {
				t.Fatalf("fence %d does not decompose into (%d, %d)", c.f, c.tli, c.seq)
			}
		}
		lexLess := tli1 < tli2 || (tli1 == tli2 && seq1 < seq2)
		if lexLess != (f1 < f2) || (f1 == f2) != (tli1 == tli2 && seq1 == seq2) {
			t.Fatalf("(%d, %d) -> %d and (%d, %d) -> %d order differently", tli1, seq1, f1, tli2, seq2, f2)
		}
	})
}

// fence is the SQL's (tli << shift) | seq, in Go's int64 as PostgreSQL's
// bigint computes it.
func fence(tli uint32, seq uint64, shift uint) int64 {
	return int64(tli)<<shift | int64(seq)
}

// fenceBounds reads the shift, the sequence's MAXVALUE and the highest
// timeline from the migration that defines pgfence_draw_fence.
func fenceBounds(tb testing.TB) (shift uint, maxSeq uint64, maxTLI uint32) {
	b, err := fs.ReadFile(migrations.FS(), "000008_baseline.up.sql")
	if err != nil {
		tb.Fatal(err)
	}
	find := func(re string) uint64 {
		m := regexp.MustCompile(re).FindSubmatch(b)
		if m == nil {
			tb.Fatalf("the baseline migration no longer matches %s: update this test with the fence arithmetic", re)
		}
		v, err := strconv.ParseUint(string(m[1]), 10, 64)
		if err != nil {
			tb.Fatal(err)
		}
		return v
	}
	mult := find(`pgfence_fence_timeline \* (\d+) \+ nextval`)
	for mult > 1 {
		if mult%2 != 0 {
			tb.Fatalf("the timeline's multiplier is no power of two")
		}
		mult /= 2
		shift++
	}
	maxSeq = find(`pgfence_fence_seq AS bigint MINVALUE 1 MAXVALUE (\d+)`)
	limit := find(`CHECK \(VALUE BETWEEN 0 AND (\d+)\)`) + 1
	if maxSeq != 1<<shift-1 || limit-1 > 1<<(63-shift)-1 {
		tb.Fatalf("the migration's bounds (shift %d, MAXVALUE %d, timeline < %d) overlap or overflow a bigint", shift, maxSeq, limit)
	}
	return shift, maxSeq, uint32(limit - 1)
}
