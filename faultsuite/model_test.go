package faultsuite

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/pgfence/pgfence/faultsuite/internal/worker"
)

// The fenced register: one per row. State is the row's (value, fence). A
// write(v, f) is accepted iff f ≥ the current fence and then sets both; it
// is refused iff f < the current fence. An ambiguous write (its answer was
// lost) may or may not have been applied. A read returns the state.

type regState struct{ Val, Fence int64 }

type regInput struct {
	Row   string
	Read  bool
	Val   int64 // write: the value written
	Fence int64 // write: the writer's fence
}

type regOutput struct {
	Out   string   // write: worker.OK, worker.Refused or worker.Ambiguous
	State regState // read: what was read
}

var fencedRegister = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byRow := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			row := op.Input.(regInput).Row
			if _, ok := byRow[row]; !ok {
				order = append(order, row)
			}
			byRow[row] = append(byRow[row], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, row := range order {
			out = append(out, byRow[row])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{regState{}} },
	Step: func(state, input, output interface{}) []interface{} {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		if in.Read {
			if out.State == s {
				return []interface{}{s}
			}
			return nil
		}
		accepted := in.Fence >= s.Fence
		next := regState{Val: in.Val, Fence: in.Fence}
		switch out.Out {
		case worker.OK:
			if accepted {
				return []interface{}{next}
			}
		case worker.Refused:
			if !accepted {
				return []interface{}{s}
			}
		case worker.Ambiguous:
			if accepted {
				return []interface{}{s, next}
			}
			return []interface{}{s}
		}
		return nil
	},
	DescribeOperation: func(input, output interface{}) string {
		in, out := input.(regInput), output.(regOutput)
		if in.Read {
			return fmt.Sprintf("%s: read -> (%d, fence %d)", in.Row, out.State.Val, out.State.Fence)
		}
		return fmt.Sprintf("%s: write(%d, fence %d) -> %s", in.Row, in.Val, in.Fence, out.Out)
	},
	DescribeState: func(state interface{}) string {
		s := state.(regState)
		return fmt.Sprintf("(%d, fence %d)", s.Val, s.Fence)
	},
}

// checkRegister runs porcupine on a history of register operations. An
// inconclusive check (timeout) is reported as such, never as a pass.
func checkRegister(ops []porcupine.Operation, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	return porcupine.CheckOperationsVerbose(fencedRegister.ToModel(), ops, timeout)
}

// never is the answer time of an operation whose answer was lost: it may
// take effect at any time after its call.
const never = math.MaxInt64

func wr(client int, call, ret int64, val, fence int64, out string) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret,
		Input: regInput{Row: "r", Val: val, Fence: fence}, Output: regOutput{Out: out}}
}

func rd(client int, call, ret int64, val, fence int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: call, Return: ret,
		Input: regInput{Row: "r", Read: true}, Output: regOutput{State: regState{val, fence}}}
}

// The model on hand-made histories: it must accept the legal ones and flag
// the illegal ones, or the suite's verdicts mean nothing.
func TestFencedRegisterModel(t *testing.T) {
	cases := []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"newer holder locks the older out", []porcupine.Operation{
			wr(0, 0, 10, 1, 5, worker.OK),
			wr(1, 20, 30, 2, 6, worker.OK),
			wr(0, 40, 50, 3, 5, worker.Refused),
			rd(2, 60, 70, 2, 6),
		}, true},
		{"stale write accepted after a newer one", []porcupine.Operation{
			wr(0, 0, 10, 1, 5, worker.OK),
			wr(1, 20, 30, 2, 6, worker.OK),
			wr(0, 40, 50, 3, 5, worker.OK),
		}, false},
		{"acknowledged write lost", []porcupine.Operation{
			wr(0, 0, 10, 1, 5, worker.OK),
			rd(1, 20, 30, 0, 0),
		}, false},
		{"refusal without a newer fence", []porcupine.Operation{
			wr(0, 0, 10, 1, 5, worker.OK),
			wr(1, 20, 30, 2, 5, worker.Refused),
		}, false},
		{"ambiguous write applied late", []porcupine.Operation{
			wr(0, 0, never, 1, 5, worker.Ambiguous),
			rd(1, 20, 30, 0, 0),
			rd(1, 40, 50, 1, 5),
		}, true},
		{"ambiguous write never applied", []porcupine.Operation{
			wr(0, 0, never, 1, 5, worker.Ambiguous),
			wr(1, 20, 30, 2, 6, worker.OK),
			rd(1, 40, 50, 2, 6),
		}, true},
		{"fence goes down", []porcupine.Operation{
			wr(0, 0, 10, 1, 6, worker.OK),
			rd(1, 20, 30, 1, 6),
			rd(1, 40, 50, 1, 5),
		}, false},
		{"concurrent writes in either order", []porcupine.Operation{
			wr(0, 0, 30, 1, 5, worker.OK),
			wr(1, 10, 20, 2, 6, worker.OK),
			rd(1, 40, 50, 2, 6),
		}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, _ := checkRegister(c.ops, 10*time.Second)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[c.legal]; res != want {
				t.Fatalf("checker says %s, want %s", res, want)
			}
		})
	}
}
