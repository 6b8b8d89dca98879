// Inventory: the classic read-modify-write race, and two fixes
// that need no lock service at all.
//
//  1. Two servers each read stock = 1, both decide the item is available,
//     both write stock = 0: one unit sold twice.
//  2. A conditional update folds the check and the decrement into one
//     statement: UPDATE ... SET quantity = quantity - 1 WHERE quantity > 0.
//     Twenty buyers race for five units; exactly five get one.
//  3. A version column gives optimistic concurrency when a row must be read,
//     thought about and written back: UPDATE ... WHERE version = <read>; zero
//     rows means someone else wrote first: re-read and try again.
//
// Fixes 2 and 3 use package lockless (Counter and Versioned), which issue
// exactly the conditional and versioned UPDATEs on your own tables; the race in 1 is shown
// in raw SQL, since it is the bug.
//
//	go run ./examples/inventory
package main
