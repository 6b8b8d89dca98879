// Package examples holds no code of its own: each directory below, but
// story (the scaffolding the programs share) and internal, is one runnable
// program per scenario of leases and fencing (see README.md in this
// directory), the demo among them, and this package's test builds and runs
// every one of them and checks its verdict line.
package examples
